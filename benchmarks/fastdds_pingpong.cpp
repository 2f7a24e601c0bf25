/* Fast DDS's own round trip, as ddsperf ping/pong measures CycloneDDS's: a C++ ping and pong on
 * Debian's libfastrtps, with no Python anywhere.
 *
 *   fastdds_pingpong pong DOMAIN
 *   fastdds_pingpong ping DOMAIN SIZE RATE_HZ DURATION_S
 *
 * Both are participants of the kit's Fast DDS helper (fastddsstamp.cpp, included below), so they
 * run the transport the kit's perf rows run: UDPv4 on 127.0.0.1 only, unicast discovery, QoS
 * reliable, keep last 10, volatile (the kit's "default" profile). The pong answers each ping from
 * its DataReaderListener, in Fast DDS's receive thread, as ddsperf's pong does in its listener.
 * The sample is a sequence of octets of SIZE bytes behind a sequence number and the send time
 * (CLOCK_MONOTONIC, read right before the write); the ping reads the clock first thing in its
 * listener. Pings leave at RATE_HZ (the perf row's rate), after warm-up pings until one came back.
 * ``ping`` prints one JSON line: {"rtt_ms": [...], "elapsed_s": ..., "lost": ...}.
 */
// the helper's types live in an anonymous namespace, which GCC flags in an included file
#pragma GCC diagnostic ignored "-Wsubobject-linkage"
#include "../fieldtest/middleware/fastdds/fastddsstamp.cpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

namespace {

const char *PING_TOPIC = "fieldtest_pingpong_ping";
const char *PONG_TOPIC = "fieldtest_pingpong_pong";
const char *TYPE_NAME = "fieldtest::PingPong_";
const uint32_t SEQ_AT = 4, STAMP_AT = 8, LENGTH_AT = 16, PAYLOAD_AT = 20;  // CDR header first
const int64_t WARMUP_SEQ = 1LL << 30;
const double MATCH_TIMEOUT_S = 20.0;
const double WARMUP_PERIOD_S = 0.2;

std::atomic<bool> stopping{false};

void on_signal(int) { stopping = true; }

DataWriter *writer_on(ft_participant *p, const char *topic) {
  auto *e = static_cast<Endpoint *>(ft_writer_new(p, topic, TYPE_NAME, 1, 0, 10, 0));
  return e ? e->writer : nullptr;
}

DataReader *reader_on(ft_participant *p, const char *topic, DataReaderListener *listener) {
  std::lock_guard<std::mutex> guard(p->lock);
  Topic *t = find_or_create_topic(p->participant, topic, TYPE_NAME);
  if (t == nullptr)
    return nullptr;
  DataReaderQos qos = p->subscriber->get_default_datareader_qos();
  endpoint_qos(qos, 1, 0, 10, 0);
  return p->subscriber->create_datareader(t, qos, listener, StatusMask::data_available());
}

/* Answers every ping at once, from the thread that received it. */
class Echo : public DataReaderListener {
 public:
  DataWriter *writer = nullptr;
  void on_data_available(DataReader *reader) override {
    Bytes sample;
    SampleInfo info;
    while (reader->take_next_sample(&sample, &info) == ReturnCode_t::RETCODE_OK)
      if (info.valid_data)
        writer->write(&sample);
  }
};

/* Keeps each echo's round trip (ns); counts the warm-up echoes apart. */
class Times : public DataReaderListener {
 public:
  std::mutex lock;
  std::vector<int64_t> rtt_ns;
  std::atomic<int> warm{0};
  void on_data_available(DataReader *reader) override {
    int64_t now = now_ns(0);
    Bytes sample;
    SampleInfo info;
    while (reader->take_next_sample(&sample, &info) == ReturnCode_t::RETCODE_OK) {
      if (!info.valid_data || sample.size < PAYLOAD_AT)
        continue;
      uint32_t seq;
      int64_t sent;
      memcpy(&seq, sample.data + SEQ_AT, 4);
      memcpy(&sent, sample.data + STAMP_AT, 8);
      if (seq >= WARMUP_SEQ) {
        warm++;
      } else {
        std::lock_guard<std::mutex> guard(lock);
        rtt_ns.push_back(now - sent);
      }
    }
  }
};

ft_participant *participant(uint32_t domain, const char *name) {
  char err[512] = "";
  ft_participant *p = ft_participant_new(domain, name, "127.0.0.1", UNICAST, "127.0.0.1", "", "", err, sizeof(err));
  if (p == nullptr)
    fprintf(stderr, "%s\n", err);
  return p;
}

bool matched(DataWriter *w, DataReader *r) {
  PublicationMatchedStatus pub;
  SubscriptionMatchedStatus sub;
  w->get_publication_matched_status(pub);
  r->get_subscription_matched_status(sub);
  return pub.current_count > 0 && sub.current_count > 0;
}

void sleep_until(int64_t due_ns) {
  struct timespec ts = {(time_t)(due_ns / 1000000000LL), (long)(due_ns % 1000000000LL)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0 && !stopping) {
  }
}

int pong(uint32_t domain) {
  ft_participant *p = participant(domain, "fastdds_pong");
  if (p == nullptr)
    return 1;
  Echo echo;
  echo.writer = writer_on(p, PONG_TOPIC);
  DataReader *reader = echo.writer ? reader_on(p, PING_TOPIC, &echo) : nullptr;
  if (reader == nullptr) {
    fprintf(stderr, "pong: Fast DDS refused the endpoints\n");
    return 1;
  }
  printf("PONG READY\n");
  fflush(stdout);
  while (!stopping)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ft_participant_free(p);
  return 0;
}

int ping(uint32_t domain, uint32_t size, double rate_hz, double duration_s) {
  ft_participant *p = participant(domain, "fastdds_ping");
  if (p == nullptr)
    return 1;
  Times times;
  DataWriter *writer = writer_on(p, PING_TOPIC);
  DataReader *reader = writer ? reader_on(p, PONG_TOPIC, &times) : nullptr;
  if (reader == nullptr) {
    fprintf(stderr, "ping: Fast DDS refused the endpoints\n");
    return 1;
  }
  std::vector<unsigned char> buf(PAYLOAD_AT + size, 0);
  buf[1] = 1;  // CDR little endian
  memcpy(buf.data() + LENGTH_AT, &size, 4);
  Bytes sample;
  sample.data = buf.data();
  sample.size = (uint32_t)buf.size();
  auto send = [&](uint32_t seq) {
    memcpy(buf.data() + SEQ_AT, &seq, 4);
    int64_t t = now_ns(0);
    memcpy(buf.data() + STAMP_AT, &t, 8);
    writer->write(&sample);
  };
  int64_t give_up = now_ns(0) + (int64_t)(MATCH_TIMEOUT_S * 1e9);
  for (uint32_t seq = WARMUP_SEQ; times.warm == 0; seq++) {
    if (now_ns(0) > give_up || stopping) {
      fprintf(stderr, "ping: no echo from a pong within %g s\n", MATCH_TIMEOUT_S);
      ft_participant_free(p);
      return 3;
    }
    if (matched(writer, reader))
      send(seq);
    sleep_until(now_ns(0) + (int64_t)(WARMUP_PERIOD_S * 1e9));
  }
  int64_t period = (int64_t)(1e9 / rate_hz);
  uint32_t count = (uint32_t)(rate_hz * duration_s + 0.5);
  int64_t start = now_ns(0) + 50000000;
  for (uint32_t seq = 0; seq < count && !stopping; seq++) {
    sleep_until(start + seq * period);
    send(seq);
  }
  double elapsed_s = (now_ns(0) - start) / 1e9;  // the sending, as the perf row's T_loop
  sleep_until(now_ns(0) + 500000000);            // the last echo's time to come back
  std::vector<int64_t> rtts;
  {
    std::lock_guard<std::mutex> guard(times.lock);
    rtts = times.rtt_ns;
  }
  ft_participant_free(p);
  printf("{\"rtt_ms\": [");
  for (size_t i = 0; i < rtts.size(); i++)
    printf("%s%.6f", i ? ", " : "", rtts[i] / 1e6);
  printf("], \"elapsed_s\": %.3f, \"lost\": %u}\n", elapsed_s, count - (uint32_t)rtts.size());
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  std::string role = argc > 2 ? argv[1] : "";
  if (role == "pong" && argc == 3)
    return pong((uint32_t)atoi(argv[2]));
  if (role == "ping" && argc == 6)
    return ping((uint32_t)atoi(argv[2]), (uint32_t)atol(argv[3]), atof(argv[4]), atof(argv[5]));
  fprintf(stderr, "usage: %s pong DOMAIN | ping DOMAIN SIZE RATE_HZ DURATION_S\n", argv[0]);
  return 2;
}
