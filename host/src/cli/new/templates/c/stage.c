/*
 * {{name}}: keeps JSON messages whose `field` equals `equals`, tags them with a header, drops
 * the others and rejects values that are not JSON objects. Edit freely: `weir test` shows what
 * each message becomes. The SDK (weir.h) documents every function used here.
 */
#include <stdio.h>
#include <string.h>

#include "weir.h"

static char needle[512];

/* Reads the config; an error here stops the pipeline at start-up, naming the stage. */
const char *weir_init(const weir_config *config) {
    const char *field = weir_config_get(config, "field");
    const char *equals = weir_config_get(config, "equals");
    if (!field) return "missing config key `field`";
    if (!equals) return "missing config key `equals`";
    /* A tiny matcher so the template has no dependencies: `"field":"equals"` without spaces.
     * Parse properly for real work (plugins/orders-c in the Weir repository has a JSON scanner). */
    if (snprintf(needle, sizeof needle, "\"%s\":\"%s\"", field, equals) >= (int)sizeof needle)
        return "`field` and `equals` are too long";
    return NULL;
}

/* Finds `needle` in `text`, ignoring spaces in the text. */
static int contains(const weir_bytes *text, const char *pattern) {
    size_t n = strlen(pattern);
    for (size_t start = 0; start < text->len; start++) {
        size_t i = start, k = 0;
        while (i < text->len && k < n) {
            if (text->ptr[i] == ' ') { i++; continue; }
            if (text->ptr[i] != (unsigned char)pattern[k]) break;
            i++;
            k++;
        }
        if (k == n) return 1;
    }
    return 0;
}

/* Decides one message. */
weir_outcome weir_process(const weir_message *msg) {
    if (!msg->value.ptr) return weir_reject("no value");
    size_t i = 0;
    while (i < msg->value.len && msg->value.ptr[i] == ' ') i++;
    if (i == msg->value.len || msg->value.ptr[i] != '{') return weir_reject("value is not a JSON object");
    if (!contains(&msg->value, needle)) return weir_drop();
    weir_out *out = weir_emit_copy(msg);
    weir_out_header(out, "{{name}}", "matched", 7);
    return weir_next();
}
