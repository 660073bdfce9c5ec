/*
 * A running total per key in C (the same job as plugins/running-total, in Rust, and
 * plugins/running-total-{python,js}): each message's value is a JSON object with an integer
 * field (config `field`, default `amount`); the stage adds it to its key's total in the state
 * bucket `totals` and emits the message with the field `total` set to the new total. A message
 * without a key (or a key that is not UTF-8), or whose field is not an integer, is rejected and
 * counts nothing.
 *
 * The output is the input's own text with `,"total":N` spliced in before the closing brace (an
 * input that already has a `total` keeps it first; JSON readers take the last one).
 *
 * Pipeline YAML: `state: { buckets: [totals] }`.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir.h"

static const char *FIELD = "amount";

const char *weir_init(const weir_config *config) {
    const char *field = weir_config_get(config, "field");
    if (field) FIELD = field;
    return NULL;
}

typedef struct amount {
    int seen;    /* the last `FIELD` member, if any, decides */
    int integer; /* ... and whether it was an integer */
    int64_t value;
} amount;

static void member(const weir_json_member *m, void *ctx) {
    amount *a = ctx;
    if (m->key_len != strlen(FIELD) || memcmp(m->key, FIELD, m->key_len) != 0) return;
    a->seen = 1;
    a->integer = weir_json_int(m->value, &a->value);
}

weir_outcome weir_process(const weir_message *msg) {
    if (!msg->key.ptr || !weir_utf8_valid(msg->key.ptr, msg->key.len))
        return weir_reject("no key (or a key that is not UTF-8)");
    amount a = {0, 0, 0};
    size_t close_at = 0;
    weir_bytes value = msg->value.ptr ? msg->value : (weir_bytes){(const uint8_t *)"", 0};
    switch (weir_json_object(value, member, &a, &close_at)) {
    case WEIR_JSON_MALFORMED: return weir_reject("malformed JSON");
    case WEIR_JSON_OTHER: return weir_reject("not a JSON object");
    case WEIR_JSON_OBJECT: break;
    }
    if (!a.integer) return weir_reject("field `%s` is not an integer", FIELD);

    weir_bucket *totals = weir_bucket_open("totals");
    int64_t total;
    /* The store is not usable: stop rather than emit a wrong total. */
    if (!totals || !weir_state_increment(totals, (const char *)msg->key.ptr, msg->key.len, a.value, &total))
        return weir_fail("state: %s", weir_state_error());

    /* The object has the member `FIELD`, so `,` goes before the new one. */
    char member_text[40];
    int m = snprintf(member_text, sizeof member_text, ",\"total\":%" PRId64, total);
    size_t n = value.len + (size_t)m;
    char *doc = malloc(n);
    if (!doc) __builtin_trap();
    memcpy(doc, value.ptr, close_at);
    memcpy(doc + close_at, member_text, (size_t)m);
    memcpy(doc + close_at + m, value.ptr + close_at, value.len - close_at);
    weir_out *out = weir_emit_copy(msg);
    weir_out_value(out, doc, n);
    free(doc);
    return weir_next();
}
