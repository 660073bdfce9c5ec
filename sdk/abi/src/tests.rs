use super::*;

type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

fn batch(msgs: &[KeyValue<'_>]) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = BatchWriter::new(&mut buf, "orders", 3);
    for (i, (k, v)) in msgs.iter().enumerate() {
        let headers = [("h", Some(&b"x"[..])), ("null", None)];
        w.push(i as i64 + 10, Some(7), *k, *v, headers.into_iter());
    }
    w.finish();
    buf
}

#[test]
fn batch_round_trips() {
    let buf = batch(&[
        (Some(b"k"), Some(b"v")),
        (None, None),
        (Some(b""), Some(&[0xff, 0])),
    ]);
    let r = BatchReader::new(&buf).unwrap();
    assert_eq!((r.topic, r.partition, r.count), ("orders", 3, 3));
    let msgs: Vec<_> = r.map(Result::unwrap).collect();
    assert_eq!(msgs[0].key, Some(&b"k"[..]));
    assert_eq!(msgs[1].key, None);
    assert_eq!(msgs[1].value, None);
    assert_eq!(msgs[2].key, Some(&b""[..]));
    assert_eq!(msgs[2].value, Some(&[0xff, 0][..]));
    assert_eq!(msgs[2].offset, 12);
    assert_eq!(msgs[0].timestamp, Some(7));
    let h: Vec<_> = msgs[0].headers.iter().collect();
    assert_eq!(h, vec![("h", Some(&b"x"[..])), ("null", None)]);
}

#[test]
fn truncated_batch_is_an_error() {
    let buf = batch(&[(Some(b"key"), Some(b"value"))]);
    for cut in 0..buf.len() {
        let r = BatchReader::new(&buf[..cut]);
        let ok = r.map(|mut r| r.all(|m| m.is_ok())).unwrap_or(false);
        assert!(!ok, "cut at {cut} read as valid");
    }
}

fn result() -> Vec<u8> {
    let mut w = ResultWriter::new(4);
    w.keep();
    w.next(2);
    w.message(
        Some(1),
        Some("out"),
        Some(b"a"),
        Some(b"b"),
        [("h", None)].into_iter(),
    );
    w.message(None, None, None, None, std::iter::empty());
    w.reject("bad");
    w.next(0);
    w.finish()
}

#[test]
fn result_round_trips() {
    let buf = result();
    let r = ResultReader::new(&buf, 4).unwrap();
    let v: Vec<_> = r.collect();
    assert!(matches!(v[0], Verdict::Keep));
    let Verdict::Next(out) = v[1] else { panic!() };
    let out: Vec<_> = out.iter().collect();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].topic, Some("out"));
    assert_eq!(out[0].value, Some(&b"b"[..]));
    assert_eq!(out[1].key, None);
    assert!(matches!(v[2], Verdict::Reject("bad")));
    let Verdict::Next(none) = v[3] else { panic!() };
    assert!(none.is_empty());
}

#[test]
fn fail_ends_the_answer() {
    let mut w = ResultWriter::new(5);
    w.keep();
    w.fail("stop");
    assert!(w.failed());
    let buf = w.finish();
    let v: Vec<_> = ResultReader::new(&buf, 5).unwrap().collect();
    assert_eq!(v.len(), 2);
    assert!(matches!(v[1], Verdict::Fail("stop")));
}

#[test]
fn hostile_results_are_refused() {
    let good = result();
    for cut in 0..good.len() {
        assert!(ResultReader::new(&good[..cut], 4).is_err(), "cut at {cut}");
    }
    assert!(
        ResultReader::new(&good, 3).is_err(),
        "more answers than sent"
    );
    assert!(
        ResultReader::new(&good, 5).is_err(),
        "fewer answers, no fail"
    );
    let mut bad = good.clone();
    bad[4] = 9;
    assert!(ResultReader::new(&bad, 4).is_err(), "unknown verdict");
    let mut long = good;
    long.push(0);
    assert!(ResultReader::new(&long, 4).is_err(), "trailing bytes");
}

#[test]
fn all_keep_is_seen_without_decoding() {
    let mut w = ResultWriter::new(3);
    (0..3).for_each(|_| w.keep());
    let buf = w.finish();
    assert!(ResultReader::new(&buf, 3).unwrap().all_keep());
    assert!(!ResultReader::new(&result(), 4).unwrap().all_keep());
    let mut w = ResultWriter::new(2);
    w.keep();
    w.fail("x");
    let buf = w.finish();
    assert!(!ResultReader::new(&buf, 2).unwrap().all_keep());
}
