/*
 * The Weir C SDK's state calls (weir.h, "State"): the host's `wasi:keyvalue@0.2.0-draft2`
 * through wit-bindgen's bindings, with byte strings in and out, one open per bucket name, and
 * the reason of a failed call kept for weir_state_error().
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_fast.h"
#include "weir.h"

struct weir_bucket {
    char *name;
    wasi_keyvalue_store_own_bucket_t own;
    wasi_keyvalue_store_borrow_bucket_t handle;
    struct weir_bucket *next;
};

static weir_bucket *OPEN;
static char *ERROR_TEXT;
/* The value of the last weir_state_get, owned here until the next state call. */
static stage_fast_option_list_u8_t LAST_VALUE;

static void set_error(const char *text) {
    free(ERROR_TEXT);
    size_t n = strlen(text);
    ERROR_TEXT = malloc(n + 1);
    if (!ERROR_TEXT) __builtin_trap();
    memcpy(ERROR_TEXT, text, n + 1);
}

/* Takes the host's error: keeps its text and frees it. Returns false for the caller. */
static bool failed(wasi_keyvalue_store_error_t *err) {
    switch (err->tag) {
    case WASI_KEYVALUE_STORE_ERROR_NO_SUCH_STORE: set_error("no-such-store: no such bucket"); break;
    case WASI_KEYVALUE_STORE_ERROR_ACCESS_DENIED:
        set_error("access-denied: bucket not declared for this stage (state.buckets in the YAML)");
        break;
    default: {
        size_t n = err->val.other.len;
        char *t = malloc(n + 1);
        if (!t) __builtin_trap();
        memcpy(t, err->val.other.ptr, n);
        t[n] = 0;
        free(ERROR_TEXT);
        ERROR_TEXT = t;
    }
    }
    wasi_keyvalue_store_error_free(err);
    return false;
}

static void forget_value(void) {
    stage_fast_option_list_u8_free(&LAST_VALUE);
    LAST_VALUE.is_some = false;
}

static stage_fast_string_t key_of(const char *key, size_t key_len) {
    return (stage_fast_string_t){(uint8_t *)key, key_len};
}

const char *weir_state_error(void) { return ERROR_TEXT ? ERROR_TEXT : ""; }

weir_bucket *weir_bucket_open(const char *name) {
    for (weir_bucket *b = OPEN; b; b = b->next)
        if (strcmp(b->name, name) == 0) return b;
    stage_fast_string_t id = key_of(name, strlen(name));
    wasi_keyvalue_store_own_bucket_t own;
    wasi_keyvalue_store_error_t err;
    if (!wasi_keyvalue_store_open(&id, &own, &err)) {
        failed(&err);
        return NULL;
    }
    weir_bucket *b = malloc(sizeof *b);
    size_t n = strlen(name);
    char *copy = malloc(n + 1);
    if (!b || !copy) __builtin_trap();
    memcpy(copy, name, n + 1);
    *b = (weir_bucket){copy, own, wasi_keyvalue_store_borrow_bucket(own), OPEN};
    OPEN = b;
    return b;
}

bool weir_state_get(weir_bucket *b, const char *key, size_t key_len, weir_bytes *value) {
    forget_value();
    stage_fast_string_t k = key_of(key, key_len);
    wasi_keyvalue_store_error_t err;
    *value = (weir_bytes){NULL, 0};
    if (!wasi_keyvalue_store_method_bucket_get(b->handle, &k, &LAST_VALUE, &err)) return failed(&err);
    if (LAST_VALUE.is_some) {
        /* An empty value is present: point at something that is not NULL. */
        static const uint8_t EMPTY[1];
        *value = (weir_bytes){LAST_VALUE.val.len ? LAST_VALUE.val.ptr : EMPTY, LAST_VALUE.val.len};
    }
    return true;
}

bool weir_state_get_i64(weir_bucket *b, const char *key, size_t key_len, bool *found, int64_t *value) {
    weir_bytes v;
    if (!weir_state_get(b, key, key_len, &v)) return false;
    *found = v.ptr != NULL;
    *value = 0;
    if (!*found) return true;
    if (v.len != 8) {
        char text[96];
        snprintf(text, sizeof text, "the value holds %zu bytes, not a number", v.len);
        set_error(text);
        return false;
    }
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--) u = u << 8 | v.ptr[i];
    memcpy(value, &u, sizeof u);
    return true;
}

bool weir_state_set(weir_bucket *b, const char *key, size_t key_len, const void *value, size_t len) {
    forget_value();
    stage_fast_string_t k = key_of(key, key_len);
    stage_fast_list_u8_t v = {(uint8_t *)value, len};
    wasi_keyvalue_store_error_t err;
    if (!wasi_keyvalue_store_method_bucket_set(b->handle, &k, &v, &err)) return failed(&err);
    return true;
}

bool weir_state_set_i64(weir_bucket *b, const char *key, size_t key_len, int64_t value) {
    uint8_t bytes[8];
    uint64_t u;
    memcpy(&u, &value, sizeof u);
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)(u >> (8 * i));
    return weir_state_set(b, key, key_len, bytes, sizeof bytes);
}

bool weir_state_delete(weir_bucket *b, const char *key, size_t key_len) {
    forget_value();
    stage_fast_string_t k = key_of(key, key_len);
    wasi_keyvalue_store_error_t err;
    if (!wasi_keyvalue_store_method_bucket_delete(b->handle, &k, &err)) return failed(&err);
    return true;
}

bool weir_state_exists(weir_bucket *b, const char *key, size_t key_len, bool *exists) {
    forget_value();
    stage_fast_string_t k = key_of(key, key_len);
    wasi_keyvalue_store_error_t err;
    if (!wasi_keyvalue_store_method_bucket_exists(b->handle, &k, exists, &err)) return failed(&err);
    return true;
}

bool weir_state_increment(weir_bucket *b, const char *key, size_t key_len, int64_t delta, int64_t *total) {
    forget_value();
    stage_fast_string_t k = key_of(key, key_len);
    wasi_keyvalue_atomics_error_t err;
    if (!wasi_keyvalue_atomics_increment(b->handle, &k, delta, total, &err)) return failed(&err);
    return true;
}

bool weir_state_keys(weir_bucket *b, void (*each)(const char *key, size_t key_len, void *ctx), void *ctx) {
    forget_value();
    stage_fast_string_t cursor = {NULL, 0};
    char *cursor_copy = NULL;
    bool has_cursor = false;
    for (;;) {
        wasi_keyvalue_store_key_response_t page;
        wasi_keyvalue_store_error_t err;
        bool ok = wasi_keyvalue_store_method_bucket_list_keys(b->handle, has_cursor ? &cursor : NULL, &page, &err);
        free(cursor_copy);
        cursor_copy = NULL;
        if (!ok) return failed(&err);
        for (size_t i = 0; i < page.keys.len; i++) each((const char *)page.keys.ptr[i].ptr, page.keys.ptr[i].len, ctx);
        has_cursor = page.cursor.is_some;
        if (has_cursor) {
            cursor_copy = malloc(page.cursor.val.len + 1);
            if (!cursor_copy) __builtin_trap();
            memcpy(cursor_copy, page.cursor.val.ptr, page.cursor.val.len);
            cursor = (stage_fast_string_t){(uint8_t *)cursor_copy, page.cursor.val.len};
        }
        wasi_keyvalue_store_key_response_free(&page);
        if (!has_cursor) return true;
    }
}
