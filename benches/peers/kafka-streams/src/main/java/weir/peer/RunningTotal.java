package weir.peer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The Kafka Streams peer of {@code plugins/running-total} (issue 50): the sum of the integer
 * field {@code amount} per key, with the new total emitted for every input record, through
 * {@code groupByKey().aggregate(...)} on a RocksDB store.
 *
 * <p>Run: {@code java -cp 'libs/*:running-total-streams-1.jar' weir.peer.RunningTotal --bootstrap
 * B --input in --output out --app-id A --state-dir D [--guarantee exactly_once_v2|at_least_once]
 * [--cache-bytes 0] [--threads 2] [--commit-ms 100] [--session-ms 45000] [--heartbeat-ms 3000]
 * [--instance-id ID]}.
 *
 * <p>Each output value is {@code {"total":T}}; its key is the input's. It prints one line per
 * event the benchmark reads: {@code running} when the instance first reaches RUNNING, and
 * {@code restored R records in M ms} when a store's restore ends (summed over its partitions).
 */
public final class RunningTotal {
  private static final ObjectMapper JSON = new ObjectMapper();

  private RunningTotal() {}

  /** The field {@code amount} of a JSON object, as a long (0 when absent or not a number). */
  static long amount(String value) {
    try {
      JsonNode doc = JSON.readTree(value);
      JsonNode amount = doc.get("amount");
      return amount != null && amount.canConvertToLong() ? amount.asLong() : 0L;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static Map<String, String> flags(String[] args) {
    Map<String, String> m = new HashMap<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      if (!args[i].startsWith("--")) {
        throw new IllegalArgumentException("expected a --flag, got " + args[i]);
      }
      m.put(args[i].substring(2), args[i + 1]);
    }
    return m;
  }

  private static String need(Map<String, String> f, String name) {
    String v = f.get(name);
    if (v == null) {
      throw new IllegalArgumentException("missing --" + name);
    }
    return v;
  }

  public static void main(String[] args) throws InterruptedException {
    Map<String, String> f = flags(args);
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, need(f, "app-id"));
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, need(f, "bootstrap"));
    p.put(StreamsConfig.STATE_DIR_CONFIG, need(f, "state-dir"));
    p.put(
        StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
        f.getOrDefault("guarantee", StreamsConfig.EXACTLY_ONCE_V2));
    p.put(
        StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG,
        Long.parseLong(f.getOrDefault("cache-bytes", "0")));
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(f.getOrDefault("threads", "2")));
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(f.getOrDefault("commit-ms", "100")));
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    p.put(
        StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG),
        Integer.parseInt(f.getOrDefault("session-ms", "45000")));
    p.put(
        StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG),
        Integer.parseInt(f.getOrDefault("heartbeat-ms", "3000")));
    if (f.containsKey("instance-id")) {
      // Static membership: each thread's consumer gets this id with its thread's number.
      p.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), f.get("instance-id"));
    }

    StreamsBuilder b = new StreamsBuilder();
    b.stream(need(f, "input"), Consumed.with(Serdes.String(), Serdes.String()))
        .groupByKey()
        .aggregate(
            () -> 0L,
            (key, value, total) -> total + amount(value),
            Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("totals")
                .withKeySerde(Serdes.String())
                .withValueSerde(Serdes.Long()))
        .toStream()
        .mapValues(total -> "{\"total\":" + total + "}")
        .to(need(f, "output"), Produced.with(Serdes.String(), Serdes.String()));

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    AtomicLong restored = new AtomicLong();
    AtomicLong restoreStart = new AtomicLong();
    streams.setGlobalStateRestoreListener(
        new StateRestoreListener() {
          @Override
          public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
            restoreStart.compareAndSet(0, System.currentTimeMillis());
          }

          @Override
          public void onBatchRestored(TopicPartition tp, String store, long end, long n) {}

          @Override
          public void onRestoreEnd(TopicPartition tp, String store, long total) {
            long all = restored.addAndGet(total);
            long ms = System.currentTimeMillis() - restoreStart.get();
            System.out.println("restored " + all + " records in " + ms + " ms");
            System.out.flush();
          }
        });
    CountDownLatch stopped = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          if (now == KafkaStreams.State.RUNNING) {
            System.out.println("running");
            System.out.flush();
          }
          if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
            stopped.countDown();
          }
        });
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close(Duration.ofSeconds(30));
                  stopped.countDown();
                }));
    streams.start();
    stopped.await();
  }
}
