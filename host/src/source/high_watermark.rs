//! The high watermarks librdkafka already knows: every fetch response carries the partition's
//! high watermark and the client caches it, so consumer lag can be read on every tick without a
//! broker round trip (`rd_kafka_get_watermark_offsets`, which rdkafka does not wrap).
#![allow(unsafe_code)]

use std::ffi::CString;

use rdkafka::consumer::{Consumer, ConsumerContext};

/// The cached high watermark (the offset after the last message) of one partition, when a
/// fetch response has reported it.
pub fn cached_high<C, X>(consumer: &C, topic: &str, partition: i32) -> Option<i64>
where
    C: Consumer<X>,
    X: ConsumerContext,
{
    let topic = CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is alive for the borrow of `consumer`; the call only reads
    // librdkafka's cached partition state into the two out-parameters.
    let err = unsafe {
        rdkafka_sys::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka_sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some(high)
}
