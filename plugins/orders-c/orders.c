/*
 * The cross-language example stage in C (the same job as plugins/orders-{rust,python,js}; see
 * docs/languages/README.md): parse the value as JSON, keep objects whose top-level `field` is
 * the string `equals`, add the string field `tag` = `tag_value`, drop the others, and reject
 * input that has no value, is not JSON, or is not a JSON object.
 *
 * C has no JSON in its standard library; the SDK's strict RFC 8259 scanner (weir_json_object)
 * finds the top-level members without building a tree. The kept value is the input's own text
 * with the tag spliced in before the closing brace: no re-serialization, and a duplicate key
 * resolves to the last one, as in the other languages' JSON libraries.
 */
#include <stdlib.h>
#include <string.h>

#include "weir.h"

static const char *FIELD, *EQUALS, *TAG, *TAG_VALUE;

const char *weir_init(const weir_config *config) {
    FIELD = weir_config_get(config, "field");
    EQUALS = weir_config_get(config, "equals");
    TAG = weir_config_get(config, "tag");
    TAG_VALUE = weir_config_get(config, "tag_value");
    if (!FIELD) return "missing config key `field`";
    if (!EQUALS) return "missing config key `equals`";
    if (!TAG) return "missing config key `tag`";
    if (!TAG_VALUE) return "missing config key `tag_value`";
    return NULL;
}

/* ---- the stage ------------------------------------------------------------------------------ */

typedef struct match {
    char *text; /* room for the document's length */
    int matched;
} match;

/* For each top-level member: whether it is `FIELD` with the string value `EQUALS` (the last
 * `FIELD` member decides). */
static void member(const weir_json_member *m, void *ctx) {
    match *c = ctx;
    if (m->key_len != strlen(FIELD) || memcmp(m->key, FIELD, m->key_len) != 0) return;
    size_t n;
    c->matched = weir_json_string(m->value, c->text, &n) && n == strlen(EQUALS) &&
                 memcmp(c->text, EQUALS, n) == 0;
}

weir_outcome weir_process(const weir_message *msg) {
    if (!msg->value.ptr) return weir_reject("no value");
    size_t close_at = 0;
    match c = {malloc(msg->value.len + 1), 0};
    if (!c.text) __builtin_trap();
    weir_json_kind kind = weir_json_object(msg->value, member, &c, &close_at);
    free(c.text);
    if (kind == WEIR_JSON_MALFORMED) return weir_reject("malformed JSON");
    if (kind == WEIR_JSON_OTHER) return weir_reject("not a JSON object");
    if (!c.matched) return weir_drop();
    /* The object matched, so it has at least one member: splice `,"tag":"value"` before `}`. */
    size_t cap = msg->value.len + 2 + 6 * (strlen(TAG) + strlen(TAG_VALUE)) + 8;
    char *doc = malloc(cap);
    if (!doc) __builtin_trap();
    size_t n = close_at;
    memcpy(doc, msg->value.ptr, n);
    doc[n++] = ',';
    n += weir_json_quote(doc + n, TAG, strlen(TAG));
    doc[n++] = ':';
    n += weir_json_quote(doc + n, TAG_VALUE, strlen(TAG_VALUE));
    memcpy(doc + n, msg->value.ptr + close_at, msg->value.len - close_at);
    n += msg->value.len - close_at;
    weir_out *out = weir_emit_copy(msg);
    weir_out_value(out, doc, n);
    free(doc);
    return weir_next();
}
