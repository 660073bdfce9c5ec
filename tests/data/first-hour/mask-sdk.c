/* The stage of docs/contract.md's "A stage in C without an SDK", written with the C SDK: masks
 * the config's `word` in the value, routes by the key's prefix ("eu:1" goes to topic "eu"),
 * rejects values that are not UTF-8 and fails on the sentinel value "STOP". The test suite
 * (tests/tests/first_hour.rs) checks that both answer the same, on the packed and typed paths. */
#include <stdlib.h>
#include <string.h>

#include "weir.h"

static const char *word;
static size_t word_len;

const char *weir_init(const weir_config *config) {
    word = weir_config_get(config, "word");
    word_len = word ? strlen(word) : 0;
    return word_len ? NULL : "config `word` is required";
}

weir_outcome weir_process(const weir_message *msg) {
    const uint8_t *value = msg->value.ptr;
    size_t len = msg->value.len;
    const uint8_t *colon = msg->key.ptr ? memchr(msg->key.ptr, ':', msg->key.len) : NULL;
    size_t prefix = colon ? (size_t)(colon - msg->key.ptr) : 0;
    if (!value) return weir_reject("no value");
    if (len == 4 && memcmp(value, "STOP", 4) == 0) return weir_fail("sentinel STOP reached");
    if (!weir_utf8_valid(value, len)) return weir_reject("value is not UTF-8");
    if (colon && !weir_utf8_valid(msg->key.ptr, prefix)) return weir_reject("key prefix is not UTF-8");
    uint8_t *masked = NULL;
    for (size_t i = 0; i + word_len <= len;) {
        if (memcmp(value + i, word, word_len) == 0) {
            if (!masked) {
                masked = malloc(len);
                if (!masked) abort();
                memcpy(masked, value, len);
            }
            memset(masked + i, '*', word_len);
            i += word_len;
        } else {
            i++;
        }
    }
    if (!masked && !colon) return weir_keep();
    weir_out *out = weir_emit_copy(msg);
    if (masked) weir_out_value(out, masked, len); /* copied */
    if (colon) weir_out_topic_n(out, (const char *)msg->key.ptr, prefix);
    free(masked);
    return weir_next();
}
