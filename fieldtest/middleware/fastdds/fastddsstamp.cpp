/* The kit's Fast DDS transport in C: participants, raw-CDR writers and readers, send stamps taken
 * right before DataWriter::write and arrival stamps taken in the DataReaderListener.
 *
 * Built against Debian's libfastrtps (2.9) by fieldtest.cbuild; Python drives it through ctypes
 * (fieldtest.middleware.fastdds.stamp). Samples are the ROS 2 CDR bytes the kit serializes
 * (encapsulation header included), carried under the ROS type name, so rmw_fastrtps nodes read
 * them. Arrival: Fast DDS calls on_data_available in the thread that received and parsed the
 * datagram (its UDP receive thread) before the sample is taken; the clock is read there, first
 * thing, and the samples go to a queue Python's reader thread sleeps on (an eventfd).
 * Stamps are CLOCK_MONOTONIC plus a base the caller gives (its process clock's offset).
 */
#include <fastdds/dds/domain/DomainParticipant.hpp>
#include <fastdds/dds/domain/DomainParticipantFactory.hpp>
#include <fastdds/dds/publisher/DataWriter.hpp>
#include <fastdds/dds/publisher/Publisher.hpp>
#include <fastdds/dds/subscriber/DataReader.hpp>
#include <fastdds/dds/subscriber/DataReaderListener.hpp>
#include <fastdds/dds/subscriber/SampleInfo.hpp>
#include <fastdds/dds/subscriber/Subscriber.hpp>
#include <fastdds/dds/topic/TopicDataType.hpp>
#include <fastdds/dds/topic/TypeSupport.hpp>
#include <fastdds/rtps/attributes/ServerAttributes.h>
#include <fastdds/rtps/transport/UDPv4TransportDescriptor.h>
#include <fastrtps/utils/IPLocator.h>

#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

using namespace eprosima::fastdds::dds;
using eprosima::fastrtps::rtps::IPLocator;
using eprosima::fastrtps::rtps::Locator_t;
using eprosima::fastrtps::rtps::SerializedPayload_t;

namespace {

int64_t now_ns(int64_t base_ns) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + base_ns;
}

/* builtin_interfaces/Time, little endian: int32 sec (floored), uint32 nanosec. */
void put_time_le(unsigned char *p, int64_t ns) {
  int64_t sec = ns / 1000000000LL, nsec = ns % 1000000000LL;
  if (nsec < 0) {
    nsec += 1000000000LL;
    sec -= 1;
  }
  uint32_t words[2] = {(uint32_t)(int32_t)sec, (uint32_t)nsec};
  for (int w = 0; w < 2; w++)
    for (int i = 0; i < 4; i++)
      p[4 * w + i] = (unsigned char)(words[w] >> (8 * i));
}

struct Bytes {
  const unsigned char *data = nullptr;
  uint32_t size = 0;
  std::vector<unsigned char> owned;  // what a take deserializes into
};

/* A type that carries serialized CDR as it is: the kit serializes, Fast DDS only copies. */
class RawCdrType : public TopicDataType {
 public:
  explicit RawCdrType(const std::string &name) {
    setName(name.c_str());
    m_typeSize = 4096;  // a first payload size; the pools grow to the largest sample
    m_isGetKeyDefined = false;
    auto_fill_type_object(false);
    auto_fill_type_information(false);
  }
  bool serialize(void *data, SerializedPayload_t *payload) override {
    auto *in = static_cast<Bytes *>(data);
    if (payload->max_size < in->size)
      payload->reserve(in->size);
    memcpy(payload->data, in->data, in->size);
    payload->length = in->size;
    payload->encapsulation = (in->size > 1 && (in->data[1] & 1)) ? CDR_LE : CDR_BE;
    return true;
  }
  bool deserialize(SerializedPayload_t *payload, void *data) override {
    auto *out = static_cast<Bytes *>(data);
    out->owned.assign(payload->data, payload->data + payload->length);
    out->data = out->owned.data();
    out->size = payload->length;
    return true;
  }
  std::function<uint32_t()> getSerializedSizeProvider(void *data) override {
    uint32_t size = static_cast<Bytes *>(data)->size;
    return [size]() { return size; };
  }
  void *createData() override { return new Bytes(); }
  void deleteData(void *data) override { delete static_cast<Bytes *>(data); }
  bool getKey(void *, eprosima::fastrtps::rtps::InstanceHandle_t *, bool) override { return false; }
};

}  // namespace

/* ---- the arrival queue (the same C interface as the CycloneDDS helper's) ---- */

struct ft_queue {
  std::mutex lock;
  struct Entry {
    int32_t tag;
    int64_t arrival_ns;
    std::vector<unsigned char> data;
  };
  std::deque<Entry> entries;
  int efd = -1;
  int64_t base_ns = 0;
  uint64_t dropped = 0;

  void signal() {
    uint64_t one = 1;
    ssize_t w = write(efd, &one, sizeof(one));
    (void)w; /* fails only if the counter would overflow: the reader is awake anyway */
  }
};

extern "C" {

ft_queue *ft_queue_new(int64_t base_ns) {
  auto *q = new (std::nothrow) ft_queue();
  if (q == nullptr)
    return nullptr;
  q->efd = eventfd(0, EFD_CLOEXEC);
  if (q->efd < 0) {
    delete q;
    return nullptr;
  }
  q->base_ns = base_ns;
  return q;
}

int ft_queue_fd(const ft_queue *q) { return q->efd; }

uint64_t ft_queue_dropped(ft_queue *q) {
  std::lock_guard<std::mutex> guard(q->lock);
  return q->dropped;
}

int64_t ft_queue_pop(ft_queue *q, int32_t *tag, int64_t *arrival_ns, unsigned char *buf, uint32_t cap) {
  ft_queue::Entry entry;
  {
    std::lock_guard<std::mutex> guard(q->lock);
    if (q->entries.empty())
      return 0;
    if (q->entries.front().data.size() > cap)
      return -(int64_t)q->entries.front().data.size();
    entry = std::move(q->entries.front());
    q->entries.pop_front();
  }
  *tag = entry.tag;
  *arrival_ns = entry.arrival_ns;
  memcpy(buf, entry.data.data(), entry.data.size());
  return (int64_t)entry.data.size();
}

int64_t ft_queue_next(ft_queue *q, int32_t *tag, int64_t *arrival_ns, unsigned char *buf, uint32_t cap) {
  int64_t size = ft_queue_pop(q, tag, arrival_ns, buf, cap);
  if (size != 0)
    return size;
  uint64_t count;
  ssize_t r = read(q->efd, &count, sizeof(count));
  (void)r; /* EINTR: the caller asks again */
  return ft_queue_pop(q, tag, arrival_ns, buf, cap);
}

void ft_queue_wake(ft_queue *q) { q->signal(); }

void ft_queue_free(ft_queue *q) {
  close(q->efd);
  delete q;
}

}  // extern "C"

namespace {

class ArrivalListener : public DataReaderListener {
 public:
  ArrivalListener(ft_queue *queue, int32_t tag) : queue_(queue), tag_(tag) {}
  void on_data_available(DataReader *reader) override {
    int64_t arrival = now_ns(queue_->base_ns);  // first thing: nothing taken yet
    Bytes sample;
    SampleInfo info;
    int queued = 0;
    while (reader->take_next_sample(&sample, &info) == ReturnCode_t::RETCODE_OK) {
      if (!info.valid_data)
        continue;
      std::lock_guard<std::mutex> guard(queue_->lock);
      queue_->entries.push_back({tag_, arrival, std::move(sample.owned)});
      queued++;
    }
    if (queued)
      queue_->signal();
  }

 private:
  ft_queue *queue_;
  int32_t tag_;
};

struct Endpoint {
  DataWriter *writer = nullptr;
  DataReader *reader = nullptr;
  std::unique_ptr<ArrivalListener> listener;
};

}  // namespace

struct ft_participant {
  DomainParticipant *participant = nullptr;
  Publisher *publisher = nullptr;
  Subscriber *subscriber = nullptr;
  std::mutex lock;
  std::vector<std::unique_ptr<Endpoint>> endpoints;
};

namespace {

enum Discovery { SPDP = 0, ALL = 1, UNICAST = 2, SERVER = 3 };

void set_error(char *err, uint32_t cap, const std::string &text) {
  if (cap == 0)
    return;
  snprintf(err, cap, "%s", text.c_str());
}

Locator_t udp_locator(const std::string &address, uint32_t port) {
  Locator_t loc;
  loc.kind = LOCATOR_KIND_UDPv4;
  IPLocator::setIPv4(loc, address);
  loc.port = port;
  return loc;
}

std::vector<std::string> split(const std::string &text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);)
    if (!item.empty())
      out.push_back(item);
  return out;
}

Topic *find_or_create_topic(DomainParticipant *p, const char *topic, const char *type) {
  TypeSupport support(new RawCdrType(type));
  if (p->find_type(type).empty() && support.register_type(p) != ReturnCode_t::RETCODE_OK)
    return nullptr;
  TopicDescription *found = p->lookup_topicdescription(topic);
  if (found != nullptr)
    return dynamic_cast<Topic *>(found);
  return p->create_topic(topic, type, p->get_default_topic_qos());
}

template <typename Qos>
void endpoint_qos(Qos &qos, int reliable, int keep_all, int depth, int transient_local) {
  if (reliable) {
    qos.reliability().kind = RELIABLE_RELIABILITY_QOS;
    qos.reliability().max_blocking_time = eprosima::fastrtps::Duration_t(0, 100000000);  // 0.1 s
  } else {
    qos.reliability().kind = BEST_EFFORT_RELIABILITY_QOS;
  }
  qos.history().kind = keep_all ? KEEP_ALL_HISTORY_QOS : KEEP_LAST_HISTORY_QOS;
  qos.history().depth = depth > 0 ? depth : 1;
  qos.durability().kind = transient_local ? TRANSIENT_LOCAL_DURABILITY_QOS : VOLATILE_DURABILITY_QOS;
  qos.data_sharing().off();  // through the network stack, where the twin's link is
}

}  // namespace

extern "C" {

/* A participant bound to ``own_address`` (comma-separated: each one; UDPv4 only: no shared memory, which would pass beside
 * the emulated link). ``peers``: comma-separated unicast addresses (UNICAST discovery);
 * ``server``: "address:port" of the discovery server (SERVER); ``properties``: "name=value" lines
 * (the DDS Security plugins' settings). NULL on failure, with the reason in ``err``. */
ft_participant *ft_participant_new(uint32_t domain_id, const char *name, const char *own_address, int discovery,
                                   const char *peers, const char *server, const char *properties, char *err,
                                   uint32_t err_cap) {
  DomainParticipantQos qos = PARTICIPANT_QOS_DEFAULT;
  qos.name(name);
  auto udp = std::make_shared<eprosima::fastdds::rtps::UDPv4TransportDescriptor>();
  for (const auto &address : split(own_address, ','))
    udp->interfaceWhiteList.push_back(address);
  /* Unicast discovery reaches participant ids 0..31 at each peer address: Fast DDS 2.9 numbers a
   * process's participants from a counter that never goes back, and every kit process on one
   * machine has ids of its own. */
  udp->maxInitialPeersRange = 32;
  qos.transport().user_transports.push_back(udp);
  qos.transport().use_builtin_transports = false;
  auto &builtin = qos.wire_protocol().builtin;
  if (discovery == UNICAST) {
    for (const auto &peer : split(peers, ','))
      builtin.initialPeersList.push_back(udp_locator(peer, 0));  // port 0: every participant id's
  } else if (discovery == ALL) {
    qos.wire_protocol().default_multicast_locator_list.push_back(udp_locator("239.255.0.1", 0));
  } else if (discovery == SERVER) {
    auto parts = split(server, ':');
    if (parts.size() != 2) {
      set_error(err, err_cap, std::string("discovery server ") + server + ": use address:port");
      return nullptr;
    }
    eprosima::fastdds::rtps::RemoteServerAttributes remote;
    // the prefix of server 0 as ROS_DISCOVERY_SERVER and `fastdds discovery -i 0` make it
    remote.ReadguidPrefix("44.53.00.5f.45.50.52.4f.53.49.4d.41");
    remote.metatrafficUnicastLocatorList.push_back(udp_locator(parts[0], (uint32_t)std::stoul(parts[1])));
    builtin.discovery_config.discoveryProtocol = eprosima::fastrtps::rtps::DiscoveryProtocol_t::CLIENT;
    builtin.discovery_config.m_DiscoveryServers.push_back(remote);
  }
  for (const auto &line : split(properties, '\n')) {
    auto eq = line.find('=');
    if (eq != std::string::npos)
      qos.properties().properties().emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  auto *out = new ft_participant();
  out->participant = DomainParticipantFactory::get_instance()->create_participant(domain_id, qos);
  if (out->participant == nullptr) {
    set_error(err, err_cap, "Fast DDS refused the participant (its log above says why)");
    delete out;
    return nullptr;
  }
  out->publisher = out->participant->create_publisher(PUBLISHER_QOS_DEFAULT);
  out->subscriber = out->participant->create_subscriber(SUBSCRIBER_QOS_DEFAULT);
  if (out->publisher == nullptr || out->subscriber == nullptr) {
    set_error(err, err_cap, "Fast DDS refused a publisher or subscriber");
    out->participant->delete_contained_entities();
    DomainParticipantFactory::get_instance()->delete_participant(out->participant);
    delete out;
    return nullptr;
  }
  return out;
}

/* A writer on ``topic`` (DDS name) of ``type``; NULL if refused (e.g. a topic the permissions deny). */
void *ft_writer_new(ft_participant *p, const char *topic, const char *type, int reliable, int keep_all, int depth,
                    int transient_local) {
  std::lock_guard<std::mutex> guard(p->lock);
  Topic *t = find_or_create_topic(p->participant, topic, type);
  if (t == nullptr)
    return nullptr;
  DataWriterQos qos = p->publisher->get_default_datawriter_qos();
  endpoint_qos(qos, reliable, keep_all, depth, transient_local);
  auto endpoint = std::make_unique<Endpoint>();
  endpoint->writer = p->publisher->create_datawriter(t, qos);
  if (endpoint->writer == nullptr)
    return nullptr;
  p->endpoints.push_back(std::move(endpoint));
  return p->endpoints.back().get();
}

/* A reader whose samples go to ``queue`` under ``tag``, stamped on arrival; NULL if refused. */
void *ft_reader_new(ft_participant *p, const char *topic, const char *type, int reliable, int keep_all, int depth,
                    int transient_local, ft_queue *queue, int32_t tag) {
  std::lock_guard<std::mutex> guard(p->lock);
  Topic *t = find_or_create_topic(p->participant, topic, type);
  if (t == nullptr)
    return nullptr;
  DataReaderQos qos = p->subscriber->get_default_datareader_qos();
  endpoint_qos(qos, reliable, keep_all, depth, transient_local);
  auto endpoint = std::make_unique<Endpoint>();
  endpoint->listener = std::make_unique<ArrivalListener>(queue, tag);
  endpoint->reader = p->subscriber->create_datareader(t, qos, endpoint->listener.get(),
                                                       StatusMask::data_available());
  if (endpoint->reader == nullptr)
    return nullptr;
  p->endpoints.push_back(std::move(endpoint));
  // samples that arrived before the listener was attached would not call it
  p->endpoints.back()->listener->on_data_available(p->endpoints.back()->reader);
  return p->endpoints.back().get();
}

/* The clock is read and written into ``buf`` at ``offset`` just before the write. Returns the stamp
 * (ns, positive on the kit's clocks) or a negative code: one return value, no out-parameter. */
int64_t ft_write_stamped(void *endpoint, unsigned char *buf, uint32_t size, uint32_t offset, int64_t base_ns) {
  if (size < 4 || offset < 4 || offset + 8 > size || (buf[1] & 1) != 1)
    return -3; /* bad parameter: the kit's CDR is little endian */
  Bytes sample;
  sample.data = buf;
  sample.size = size;
  int64_t t = now_ns(base_ns);
  put_time_le(buf + offset, t);
  return static_cast<Endpoint *>(endpoint)->writer->write(&sample) ? t : -1;
}

int ft_write(void *endpoint, const unsigned char *buf, uint32_t size) {
  Bytes sample;
  sample.data = buf;
  sample.size = size;
  return static_cast<Endpoint *>(endpoint)->writer->write(&sample) ? 0 : -1;
}

int64_t ft_now(int64_t base_ns) { return now_ns(base_ns); }

/* Matched remote endpoints, or -1. */
int ft_matched(void *endpoint) {
  auto *e = static_cast<Endpoint *>(endpoint);
  if (e->writer != nullptr) {
    PublicationMatchedStatus status;
    return e->writer->get_publication_matched_status(status) == ReturnCode_t::RETCODE_OK ? status.current_count
                                                                                         : -1;
  }
  SubscriptionMatchedStatus status;
  return e->reader->get_subscription_matched_status(status) == ReturnCode_t::RETCODE_OK ? status.current_count
                                                                                       : -1;
}

/* Deletes every entity of the participant; Fast DDS waits for running listeners first. */
void ft_participant_free(ft_participant *p) {
  // A reliable writer's last samples (the stop burst) may still be unacknowledged: give them the
  // 1 s CycloneDDS lingers for on deleting a writer (its Internal/WriterLingerDuration default),
  // since Fast DDS drops them with the writer.
  for (auto &endpoint : p->endpoints)
    if (endpoint->writer != nullptr)
      endpoint->writer->wait_for_acknowledgments(eprosima::fastrtps::Duration_t(1, 0));
  p->participant->delete_contained_entities();
  DomainParticipantFactory::get_instance()->delete_participant(p->participant);
  delete p;
}

}  // extern "C"
