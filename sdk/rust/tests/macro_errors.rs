//! A signature the SDK cannot call is a compile error pointing at the offending part.

#[test]
fn bad_signatures_are_spanned_compile_errors() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
