/*
 * wifi_link: one 802.11 basic service set simulated by ns-3 in real time, joined to Linux network
 * namespaces through persistent TAP devices (fieldtest.netem.wifi80211 starts it; docs/networks.md).
 *
 *   wifi_link --stats=FILE [--standard=80211n --band=5 --channel=36 --distance=M --exponent=3 --reference-loss=DB
 *             --fading-m=M (0: none) --seed=S --run=R --beacon-interval-tu=TU --dtim-period=D
 *             --listen-interval=L --ps=NAME:TIMEOUT_MS ... --others=N --other-load-kbit=K --rt-priority=P
 *             --mac=infrastructure|adhoc --rate-control=minstrel|constant --data-mode=OfdmRate54Mbps]
 *             --sta=NAME:NETNS:TAP ... [--ap=NETNS:TAP]
 *
 * Every --sta is a station (STA) of one access point (AP); the AP's wired side is --ap, a TAP on
 * the switch bridge, so wired nodes reach the stations through the AP as in a lab. --mac=adhoc
 * makes the stations one independent BSS instead (ns-3 AdhocWifiMac: no AP, no beacons, no
 * association; --ap is then refused): the station named "host" (else the first) sits at the origin
 * and the others at --distance from it. --rate-control=constant sends every unicast data frame at
 * --data-mode (ns-3 ConstantRateWifiManager); minstrel is Linux mac80211's default. Each STA's
 * Wi-Fi MAC address is the TAP's own, so the kernel's frames leave the station unchanged (an
 * 802.11 station cannot bridge other addresses without 4-address mode).
 *
 * stdin commands, one line each, answered with one line: "stats" (writes FILE, answers ok),
 * "down NAME" / "up NAME" (the station drops all traffic / passes it again), "ap-forget NAME" (the
 * access point forgets the station's association, as after a lost association-response ACK; see
 * repair_associations). End of stdin stops it (FILE is written once more). stdout's first line is
 * "ready" once every station was associated at two checks 100 ms apart.
 *
 * Station power save (--ps) is not in ns-3 3.37 (StaWifiMac has no PS mode: no PS-Poll, no TIM or
 * DTIM buffering); it is modelled here, next to ns-3's MAC: see "Power save" below.
 */
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ns3/bridge-module.h"
#include "ns3/fcfs-wifi-queue-scheduler.h"
#include "ns3/core-module.h"
#include "ns3/fd-net-device-module.h"
#include "ns3/mobility-module.h"
#include "ns3/network-module.h"
#include "ns3/propagation-module.h"
#include "ns3/realtime-simulator-impl.h"
#include "ns3/wifi-module.h"

using namespace ns3;

namespace {

struct LinkConfig {
    std::string stats_path;
    std::string standard = "80211n";
    int band_ghz = 5;
    int channel = 36;
    double distance_m = 10.0;
    double exponent = 3.0;
    double reference_loss_db = -1;  // loss at 1 m; negative: Friis for the channel's frequency
    double fading_m = 0.0;
    uint32_t seed = 1;
    uint64_t run = 1;
    double assoc_timeout_s = 20.0;
    uint32_t beacon_interval_tu = 100;  // IEEE 802.11-2016 9.4.1.3: beacon interval in TU (1024 us)
    uint32_t dtim_period = 1;           // beacons per DTIM (9.4.2.6); only matters with power save
    uint32_t listen_interval = 1;       // a dozing station reads every L-th beacon's TIM (11.2.3.1)
    std::map<std::string, double> ps_timeout_ms;  // station name -> dynamic power save timeout
    int rt_priority = 10;               // SCHED_FIFO priority (fieldtest.realtime.LINK_REALTIME_PRIORITY)
    uint32_t others = 0;                // other stations on the channel, with their own traffic
    double other_load_kbit = 0;         // offered load of each, half uplink, half downlink
    bool others_shared_radio = true;    // one ns-3 station sends for all of them (see "Other stations")
    bool adhoc = false;                 // one IBSS of the stations (ns-3 AdhocWifiMac), no access point
    bool constant_rate = false;         // ns-3 ConstantRateWifiManager at data_mode; else Minstrel
    std::string data_mode;              // an ns-3 WifiMode name, e.g. OfdmRate54Mbps
    struct Port {
        std::string name, netns, tap;
    };
    std::vector<Port> stations;
    Port ap{"ap", "", ""};
};

struct KindStats {
    uint64_t frames = 0, retries = 0, bytes = 0;
    double airtime_s = 0;
    std::map<std::string, uint64_t> modes;
    std::map<std::string, std::pair<uint64_t, uint64_t>> by_size;  // MPDU size class -> frames, retries
};

/* Size classes of an MPDU (bytes, MAC header and FCS included): the error model's frame-size
 * dependence shows as more retries per frame in the larger class at the same distance. */
const char *size_class(uint32_t bytes) {
    return bytes <= 300 ? "le300" : bytes < 1000 ? "301-999" : "ge1000";
}

struct PortStats {
    uint64_t from_kernel = 0, to_kernel = 0, to_kernel_group = 0, dropped_down = 0;
};

struct State {
    LinkConfig cfg;
    std::map<std::string, KindStats> tx;        // by kind: group, group_uplink, unicast, management, control
    std::map<std::string, uint64_t> mac_drops;  // "<kind>:<reason>"
    std::map<std::string, uint64_t> phy_rx_failures;  // by ns-3 failure reason
    std::map<std::string, PortStats> ports;
    std::map<std::string, std::atomic<bool>*> down;
    std::vector<uint32_t> lag_us;
    uint32_t associated = 0;  // stations that consider themselves associated
    uint64_t deassociations = 0;
    uint64_t association_repairs = 0;  // see repair_associations()
    uint64_t association_guards = 0;   // see stop_waiting_for_association()
    std::string rate_manager, data_mode, control_mode;  // the unicast rate control as ns-3 runs it
    bool ready = false;
    bool realtime = false;
    std::string basic_mode;
    std::mutex cmd_lock;
    std::deque<std::string> commands;
    std::atomic<bool> eof{false};
    double wall_start = 0;
};

State g;

double monotonic_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void fail(const std::string &msg) {
    std::cout << "error " << msg << std::endl;
    std::cerr << "wifi_link: " << msg << std::endl;
    std::exit(1);
}

/* Open a persistent TAP inside a namespace (the tun socket belongs to the namespace current at
 * open()), read its MAC address there, and come back. Before ns-3 starts threads: setns is per thread. */
int open_tap(const LinkConfig::Port &port, Mac48Address *mac) {
    int home = open("/proc/self/ns/net", O_RDONLY);
    std::string path = "/run/netns/" + port.netns;
    int nsfd = open(path.c_str(), O_RDONLY);
    if (home < 0 || nsfd < 0 || setns(nsfd, CLONE_NEWNET) < 0)
        fail("cannot enter network namespace " + port.netns + ": " + strerror(errno));
    int fd = open("/dev/net/tun", O_RDWR);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    strncpy(ifr.ifr_name, port.tap.c_str(), IFNAMSIZ - 1);
    if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) < 0)
        fail("cannot attach to tap " + port.tap + " in " + port.netns + ": " + strerror(errno));
    int sock = socket(AF_INET, SOCK_DGRAM, 0);
    if (sock < 0 || ioctl(sock, SIOCGIFHWADDR, &ifr) < 0)
        fail("cannot read the MAC address of " + port.tap + ": " + strerror(errno));
    uint8_t raw[6];
    memcpy(raw, ifr.ifr_hwaddr.sa_data, 6);
    mac->CopyFrom(raw);
    close(sock);
    if (setns(home, CLONE_NEWNET) < 0) fail(std::string("cannot return to own namespace: ") + strerror(errno));
    close(home);
    close(nsfd);
    return fd;
}

/* How far the simulation runs behind the wall clock (0 when on time); from association on. */
void record_lag() {
    if (!g.ready) return;
    auto impl = DynamicCast<RealtimeSimulatorImpl>(Simulator::GetImplementation());
    int64_t lag_ns = (impl->RealtimeNow() - Simulator::Now()).GetNanoSeconds();
    g.lag_us.push_back(lag_ns > 0 ? static_cast<uint32_t>(std::min<int64_t>(lag_ns / 1000, UINT32_MAX)) : 0);
}

std::string frame_kind(const WifiMacHeader &hdr) {
    if (hdr.IsCtl()) return "control";
    if (hdr.IsMgt()) return "management";
    if (hdr.GetAddr1().IsGroup()) return "group";  // the AP's group-addressed frame: no ACK, no retry
    if (hdr.IsToDs() && hdr.GetAddr3().IsGroup()) return "group_uplink";  // STA -> AP leg: acknowledged
    return "unicast";
}

/* A retry may go out at another rate than the first transmission (rate control's fallback), so the
 * first transmissions' own airtime is kept apart: on a medium without collisions it is fixed by the
 * frames and the rates alone. */
struct AirtimeStats {
    uint64_t frames = 0, retries = 0;
    double airtime_s = 0;
    uint64_t first_ppdus = 0;  // PPDUs with no retried MPDU
    double first_airtime_s = 0;
};
std::map<std::string, AirtimeStats> g_airtime;  // by transmitting node: station name, "ap", "otherN"

/* Channel access of the wireless nodes' own frames, in simulated time: from the frame's arrival at
 * the station's MAC to the start of its first transmission (queueing, deferral to frames already on
 * the air, backoff). It is what other stations cost a frame, free of the machine's own delays. */
std::map<uint64_t, Time> g_access_pending;                 // packet uid -> handed to the MAC
std::map<std::string, std::vector<uint32_t>> g_access_ns;  // by station name
std::map<std::string, int64_t> g_aifs_ns;  // a frame that waited this long found the medium busy

/* The station's AIFS for best-effort data (SIFS + AIFSN slots): a frame handed to an idle MAC on an
 * idle medium goes at once, one that found the medium busy waits at least this after it. */
int64_t aifs_ns(Ptr<WifiNetDevice> dev) {
    Ptr<WifiMac> mac = dev->GetMac();
    Ptr<Txop> txop = mac->GetQosSupported() ? Ptr<Txop>(mac->GetQosTxop(AC_BE)) : mac->GetTxop();
    return (dev->GetPhy()->GetSifs() + dev->GetPhy()->GetSlot() * txop->GetAifsn()).GetNanoSeconds();
}

/* One transmitter's PHY and its name, bound to its PhyTxPsduBegin trace. */
struct TxSource {
    Ptr<WifiPhy> phy;
    std::string name;
};

void on_beacon(Time airtime);

/* Every PPDU on the air: frames, retries (the Retry bit of the MPDU header), rate and airtime by
 * kind and by transmitter; the access point's beacons drive the power-save model. */
void on_tx_psdu(const TxSource *src, WifiConstPsduMap psdus, WifiTxVector txv, double) {
    Time airtime = WifiPhy::CalculateTxDuration(psdus, txv, src->phy->GetPhyBand());
    AirtimeStats &by_station = g_airtime[src->name];
    by_station.airtime_s += airtime.GetSeconds();
    bool retried = false;  // any MPDU of this PPDU sent before
    bool first = true;
    for (auto &[sta, psdu] : psdus) {
        for (auto it = psdu->begin(); it != psdu->end(); ++it) {
            const WifiMacHeader &hdr = (*it)->GetHeader();
            if (hdr.IsBeacon()) on_beacon(airtime);
            KindStats &k = g.tx[frame_kind(hdr)];
            if (first) k.airtime_s += airtime.GetSeconds();
            first = false;
            k.frames++;
            k.bytes += (*it)->GetSize();
            k.retries += hdr.IsRetry() ? 1 : 0;
            by_station.frames++;
            by_station.retries += hdr.IsRetry() ? 1 : 0;
            retried = retried || hdr.IsRetry();
            auto pending = g_access_pending.find((*it)->GetPacket()->GetUid());
            if (pending != g_access_pending.end() && hdr.IsData()) {
                int64_t ns = (Simulator::Now() - pending->second).GetNanoSeconds();
                g_access_ns[src->name].push_back(static_cast<uint32_t>(std::min<int64_t>(ns, UINT32_MAX)));
                g_access_pending.erase(pending);
            }
            auto &bin = k.by_size[size_class((*it)->GetSize())];
            bin.first++;
            bin.second += hdr.IsRetry() ? 1 : 0;
            k.modes[txv.GetMode(sta).GetUniqueName()]++;
        }
    }
    if (!retried) {
        by_station.first_ppdus++;
        by_station.first_airtime_s += airtime.GetSeconds();
    }
}

void on_mac_drop(WifiMacDropReason reason, Ptr<const WifiMpdu> mpdu) {
    static const char *names[] = {"failed_enqueue", "expired_lifetime", "retry_limit", "qos_old_packet"};
    g.mac_drops[frame_kind(mpdu->GetHeader()) + ":" + names[reason < 4 ? reason : 0]]++;
}

// frames a radio began to receive, over every radio: most of the simulator's work, one per radio
// that hears a frame (a shared radio for the other stations hears each frame once, not per station)
uint64_t g_phy_rx_begun = 0;

void on_rx_begin(Ptr<const Packet>, RxPowerWattPerChannelBand) { g_phy_rx_begun++; }

void on_rx_drop(Ptr<const Packet>, WifiPhyRxfailureReason reason) {
    std::ostringstream name;
    name << reason;
    g.phy_rx_failures[name.str()]++;
}

void on_sta_assoc(Mac48Address) { g.associated++; }

void on_sta_deassoc(Mac48Address) {
    g.deassociations++;
    if (g.associated) g.associated--;
}

Ptr<WifiNetDevice> g_ap_dev;

/* ns-3 3.37 aborts when a station misses its beacons while it waits for an association response
 * (far from the access point: 52 m, Rayleigh fading, seed 1, 1.86 s in): StaWifiMac::Disassociated
 * clears the link's BSSID and starts a new scan but leaves the association request timeout running,
 * and that timeout then sends a request with no BSSID (NS_ABORT "No BSSID set for the link on which
 * the (Re)Association Request is to be sent", sta-wifi-mac.cc). A station that lost its access point
 * stops waiting for its answer: the DeAssoc trace fires inside Disassociated, and there the pending
 * timeout is cancelled (counted in association_guards); the scan associates the station again.
 * The timer is private: reached through an explicit template instantiation, which C++ exempts from
 * access checking ([temp.explicit]). */
template <EventId StaWifiMac::*Timer>
struct AssocTimerAccess {
    friend auto assoc_request_timer() -> EventId StaWifiMac::* { return Timer; }
};
auto assoc_request_timer() -> EventId StaWifiMac::*;
template struct AssocTimerAccess<&StaWifiMac::m_assocRequestEvent>;

void stop_waiting_for_association(StaWifiMac *mac, Mac48Address) {
    EventId &timer = mac->*assoc_request_timer();
    if (timer.IsRunning()) {
        timer.Cancel();
        g.association_guards++;
    }
}

void watch_association(Ptr<StaWifiMac> sta) {
    sta->TraceConnectWithoutContext("Assoc", MakeCallback(&on_sta_assoc));
    sta->TraceConnectWithoutContext("DeAssoc", MakeCallback(&on_sta_deassoc));
    sta->TraceConnectWithoutContext("DeAssoc", MakeBoundCallback(&stop_waiting_for_association, PeekPointer(sta)));
}

/* Power save (IEEE 802.11-2016 11.2.3: power management in an infrastructure BSS), absent from
 * ns-3 3.37 and modelled here next to its MAC. A station in power save dozes once it has neither
 * sent a frame nor received a unicast one for its timeout (Linux dynamic power save: mac80211
 * restarts its dynamic_ps_timer on transmit and on unicast receive, net/mac80211/tx.c and rx.c;
 * brcmfmac's firmware counts down pm2_sleep_ret the same way). While it dozes the access point
 * holds its unicast frames in the MAC queue and sets its bit in the TIM of each beacon; the
 * station reads every listen-interval-th beacon and every DTIM beacon, sees its bit, wakes
 * (mac80211 sends a null frame with the PM bit clear, ieee80211_rx_mgmt_beacon) and the access
 * point sends what it held. A station that has a frame to send wakes at once. Group-addressed
 * frames are held while any station dozes and sent after the next DTIM beacon (11.2.3.6). Not
 * modelled: the null frames' own airtime (a few tens of microseconds each). */
struct PsStation {
    std::string name;
    double timeout_s = 0.1;
    bool dozing = false;
    bool tim_pending = false;  // the access point holds unicast for it: its TIM bit is set
    Time doze_since;
    double doze_s = 0;
    uint64_t dozes = 0, wakes_tim = 0, wakes_tx = 0, frames_buffered = 0;
    EventId doze_timer;
};

struct PsState {
    std::map<Mac48Address, PsStation> stations;
    Ptr<WifiMac> ap_mac;
    uint64_t beacons = 0, dtim_beacons = 0, group_frames_buffered = 0;
    Time last_dtim = Seconds(-1);  // end of the last DTIM beacon
    std::deque<std::pair<double, bool>> beacon_log;  // CLOCK_MONOTONIC s of each beacon, DTIM or not
} g_ps;

const size_t BEACON_LOG_MAX = 8192;  // about 14 minutes of beacons at 102.4 ms

bool any_dozing() {
    for (auto &[addr, st] : g_ps.stations)
        if (st.dozing) return true;
    return false;
}

/* Txop::StartAccessIfNeeded is protected: a frame the gate released needs channel access. */
struct TxopAccess : QosTxop {
    static void start(Ptr<QosTxop> txop) {
        void (Txop::*start_access)(uint8_t) = &TxopAccess::StartAccessIfNeeded;
        (PeekPointer(txop)->*start_access)(0);
    }
};

void kick_access_point() {
    if (g_ps.stations.empty()) return;  // no gate holds frames (and 802.11a/g's MAC has no QoS queues)
    for (AcIndex ac : {AC_BE, AC_BK, AC_VI, AC_VO}) TxopAccess::start(g_ps.ap_mac->GetQosTxop(ac));
}

void ps_doze(Mac48Address addr) {
    PsStation &st = g_ps.stations[addr];
    st.dozing = true;
    st.doze_since = Simulator::Now();
    st.dozes++;
}

void ps_wake(PsStation &st) {
    st.dozing = false;
    st.tim_pending = false;
    st.doze_s += (Simulator::Now() - st.doze_since).GetSeconds();
    kick_access_point();
}

/* A frame sent or a unicast one received: the station is (or wakes) awake, its timer restarts. */
void ps_activity(Mac48Address addr, bool transmit) {
    auto it = g_ps.stations.find(addr);
    if (it == g_ps.stations.end()) return;
    PsStation &st = it->second;
    if (st.dozing) {
        st.wakes_tx += transmit ? 1 : 0;
        ps_wake(st);
    }
    st.doze_timer.Cancel();
    st.doze_timer = Simulator::Schedule(Seconds(st.timeout_s), &ps_doze, addr);
}

/* After each beacon: DTIM beacons release the group frames held so far; a dozing station that
 * reads this beacon and finds its TIM bit wakes and gets its frames. */
void after_beacon(uint64_t index, bool dtim) {
    if (dtim) g_ps.last_dtim = Simulator::Now();
    for (auto &[addr, st] : g_ps.stations) {
        bool listens = dtim || index % g.cfg.listen_interval == 0;
        if (st.dozing && st.tim_pending && listens) {
            st.wakes_tim++;
            ps_wake(st);
            ps_activity(addr, false);
        }
    }
    if (dtim) kick_access_point();
}

void on_beacon(Time airtime) {
    uint64_t index = g_ps.beacons++;
    bool dtim = index % g.cfg.dtim_period == 0;  // DTIM count 0 (9.4.2.6) on every dtim_period-th
    g_ps.dtim_beacons += dtim ? 1 : 0;
    g_ps.beacon_log.emplace_back(monotonic_s(), dtim);
    if (g_ps.beacon_log.size() > BEACON_LOG_MAX) g_ps.beacon_log.pop_front();
    Simulator::Schedule(airtime, &after_beacon, index, dtim);
}

/* The access point's power-save buffer: its MAC queue scheduler (ns-3's first-come-first-served
 * one inside) skips the queues of dozing stations and, while any station dozes, group frames
 * queued after the last DTIM beacon. Held frames stay in ns-3's queue, so their lifetime
 * (WifiMacQueue MaxDelay, 500 ms) and the queue limit apply as to any frame. */
class PsGate : public WifiMacQueueScheduler {
  public:
    static TypeId GetTypeId() {
        static TypeId tid = TypeId("fieldtest::PsGate").SetParent<WifiMacQueueScheduler>().SetGroupName("Wifi");
        return tid;
    }

    PsGate() : m_inner(CreateObject<FcfsWifiQueueScheduler>()) {}

    void SetWifiMac(Ptr<WifiMac> mac) override {
        WifiMacQueueScheduler::SetWifiMac(mac);
        m_inner->SetWifiMac(mac);  // the queues now ask the inner scheduler: make them ask the gate
        for (AcIndex ac : {AC_BE, AC_BK, AC_VI, AC_VO}) mac->GetTxopQueue(ac)->SetScheduler(this);
    }

    std::optional<WifiContainerQueueId> GetNext(AcIndex ac, uint8_t link) override {
        return skip_held(ac, link, m_inner->GetNext(ac, link));
    }

    std::optional<WifiContainerQueueId> GetNext(AcIndex ac, uint8_t link, const WifiContainerQueueId &prev) override {
        return skip_held(ac, link, m_inner->GetNext(ac, link, prev));
    }

    std::list<uint8_t> GetLinkIds(AcIndex ac, const WifiContainerQueueId &id) override {
        return m_inner->GetLinkIds(ac, id);
    }

    void SetLinkIds(AcIndex ac, const WifiContainerQueueId &id, const std::list<uint8_t> &links) override {
        m_inner->SetLinkIds(ac, id, links);
    }

    Ptr<WifiMpdu> HasToDropBeforeEnqueue(AcIndex ac, Ptr<WifiMpdu> mpdu) override {
        return m_inner->HasToDropBeforeEnqueue(ac, mpdu);
    }

    void NotifyEnqueue(AcIndex ac, Ptr<WifiMpdu> mpdu) override {
        m_inner->NotifyEnqueue(ac, mpdu);
        const WifiMacHeader &hdr = mpdu->GetHeader();
        if (!hdr.IsData()) return;
        Mac48Address to = hdr.GetAddr1();
        if (to.IsGroup()) {
            g_ps.group_frames_buffered += any_dozing() ? 1 : 0;
            return;
        }
        auto it = g_ps.stations.find(to);
        if (it != g_ps.stations.end() && it->second.dozing) {
            it->second.tim_pending = true;
            it->second.frames_buffered++;
        }
    }

    void NotifyDequeue(AcIndex ac, const std::list<Ptr<WifiMpdu>> &mpdus) override { m_inner->NotifyDequeue(ac, mpdus); }

    void NotifyRemove(AcIndex ac, const std::list<Ptr<WifiMpdu>> &mpdus) override { m_inner->NotifyRemove(ac, mpdus); }

  private:
    bool held(AcIndex ac, const WifiContainerQueueId &id) {
        auto [type, addr, tid] = id;
        if (type == WIFI_MGT_QUEUE) return false;
        if (type == WIFI_QOSDATA_BROADCAST_QUEUE || addr.IsGroup()) {
            if (!any_dozing()) return false;
            Ptr<WifiMacQueue> queue = GetMac()->GetTxopQueue(ac);
            Ptr<WifiMpdu> head = queue->PeekByQueueId(id);
            return head && head->GetExpiryTime() - queue->GetMaxDelay() > g_ps.last_dtim;  // queued after it
        }
        auto it = g_ps.stations.find(addr);
        return it != g_ps.stations.end() && it->second.dozing;
    }

    std::optional<WifiContainerQueueId> skip_held(AcIndex ac, uint8_t link, std::optional<WifiContainerQueueId> id) {
        while (id && held(ac, *id)) id = m_inner->GetNext(ac, link, *id);
        return id;
    }

    Ptr<WifiMacQueueScheduler> m_inner;
};

/* Other stations on the channel (a lab's laptops and phones): stations of the same access point
 * contending for the medium, each offering Poisson traffic of full-size frames, half to the access
 * point and half from it. Their frames are addressed to the access point's or the station's own MAC
 * address, so they end in the node (no protocol handler) and never reach a TAP.
 *
 * Shared radio (the default): one real ns-3 station sends the uplink of all of them and the access
 * point sends it their downlink. Every frame is received by every radio on the channel, and that
 * reception is most of the simulator's work (perf: ns-3's PHY receive path, about 3/4 of the CPU):
 * five radios of their own doubled it and put the link behind real time. The channel sees the same
 * frames: N independent Poisson streams merged are one Poisson stream of N times the rate, the
 * access point's queue holds the same downlink, and the air the same data frames and ACKs. What
 * differs is only the uplink contention among the others themselves, when two of them have a frame
 * pending at once (one backoff instead of two, no collision between them); --others-radio=own
 * gives each its own radio for that. */
const uint32_t OTHER_FRAME_BYTES = 1500;  // an Ethernet-MTU IP packet
const uint16_t OTHER_ETHERTYPE = 0x88B5;  // IEEE 802 local experimental ethertype: no handler takes it

struct OtherStation {
    Ptr<WifiNetDevice> dev;  // its own radio, or the shared one
    Ptr<ExponentialRandomVariable> gap_s;
    uint64_t sent_up = 0, sent_down = 0;
};
std::vector<OtherStation> g_others;
uint32_t g_other_radios = 0;  // ns-3 stations carrying them: 1 (shared) or one each

void other_send(size_t i, bool uplink) {
    OtherStation &o = g_others[i];
    if (g.ready) {  // from association on, like the trial's own traffic
        if (uplink) {
            o.dev->Send(Create<Packet>(OTHER_FRAME_BYTES), g_ap_dev->GetAddress(), OTHER_ETHERTYPE);
            o.sent_up++;
        } else {
            g_ap_dev->Send(Create<Packet>(OTHER_FRAME_BYTES), o.dev->GetAddress(), OTHER_ETHERTYPE);
            o.sent_down++;
        }
    }
    Simulator::Schedule(Seconds(o.gap_s->GetValue()), &other_send, i, uplink);
}

/* Station glue: frames from the kernel go on the air from this station; frames the station
 * receives (to it, or group-addressed) go to the kernel with their original addresses. */
struct StationGlue {
    std::string name;
    Ptr<FdNetDevice> tap;
    Ptr<WifiNetDevice> wifi;
    std::atomic<bool> down{false};

    bool from_kernel(Ptr<NetDevice>, Ptr<const Packet> p, uint16_t protocol, const Address &, const Address &to,
                     NetDevice::PacketType) {
        record_lag();
        g.ports[name].from_kernel++;
        if (down.load()) {
            g.ports[name].dropped_down++;
            return true;
        }
        ps_activity(Mac48Address::ConvertFrom(wifi->GetAddress()), true);  // a dozing station wakes to send
        Ptr<Packet> frame = p->Copy();
        g_access_pending[frame->GetUid()] = Simulator::Now();
        wifi->Send(frame, to, protocol);
        return true;
    }

    /* What the station's MAC hands up: frames to it and group-addressed ones, after duplicate
     * detection. Taken from the MAC, not from a promiscuous device callback: that would make the
     * MAC pass overheard frames through its duplicate filter too, whose per-sender sequence state
     * then drops the AP's next frame to this station as a "duplicate" of one it sent to another. */
    void from_air(Ptr<const Packet> packet, Mac48Address from, Mac48Address to) {
        // the AP echoes our own group frames back to the BSS; a Linux station drops its own echo
        if (from == Mac48Address::ConvertFrom(wifi->GetAddress())) return;
        record_lag();
        if (down.load()) {
            g.ports[name].dropped_down++;
            return;
        }
        Ptr<Packet> p = packet->Copy();
        LlcSnapHeader llc;
        p->RemoveHeader(llc);
        g.ports[name].to_kernel++;
        if (to.IsGroup()) g.ports[name].to_kernel_group++;
        else ps_activity(to, false);  // unicast received restarts the doze timer, group frames do not
        tap->SendFrom(p, from, to, llc.GetType());
    }
};

std::string json_escape(const std::string &s) {
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}

double percentile(std::vector<uint32_t> &v, double q) {
    if (v.empty()) return 0;
    size_t k = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1)));
    std::nth_element(v.begin(), v.begin() + k, v.end());
    return v[k] / 1000.0;
}

void write_stats() {
    std::ostringstream o;
    rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    double wall = monotonic_s() - g.wall_start;
    std::vector<uint32_t> lag = g.lag_us;
    uint32_t lag_max = lag.empty() ? 0 : *std::max_element(lag.begin(), lag.end());
    o << "{\"wall_s\": " << wall << ", \"sim_s\": " << Simulator::Now().GetSeconds() << ", \"cpu_s\": " << cpu
      << ", \"cpu_pct\": " << (wall > 0 ? 100.0 * cpu / wall : 0.0) << ", \"lag_ms\": {\"samples\": " << lag.size()
      << ", \"p50\": " << percentile(lag, 0.5) << ", \"p90\": " << percentile(lag, 0.9) << ", \"p99\": " << percentile(lag, 0.99)
      << ", \"max\": " << lag_max / 1000.0 << "}, \"basic_mode\": \"" << g.basic_mode
      << "\", \"realtime\": " << (g.realtime ? "true" : "false") << ", \"rt_priority\": " << (g.realtime ? g.cfg.rt_priority : 0)
      << ", \"associated\": " << g.associated << ", \"deassociations\": " << g.deassociations
      << ", \"association_repairs\": " << g.association_repairs << ", \"association_guards\": " << g.association_guards
      << ", \"mac\": \"" << (g.cfg.adhoc ? "adhoc" : "infrastructure") << "\", \"standard\": \"" << g.cfg.standard
      << "\", \"rate_control\": {\"manager\": \"" << g.rate_manager << "\", \"data_mode\": \"" << g.data_mode
      << "\", \"control_mode\": \"" << g.control_mode << "\"}, \"tx\": {";
    bool first = true;
    for (auto &[kind, k] : g.tx) {
        o << (first ? "" : ", ") << "\"" << kind << "\": {\"frames\": " << k.frames << ", \"retries\": " << k.retries
          << ", \"bytes\": " << k.bytes << ", \"airtime_s\": " << k.airtime_s << ", \"modes\": {";
        bool m1 = true;
        for (auto &[mode, n] : k.modes) {
            o << (m1 ? "" : ", ") << "\"" << json_escape(mode) << "\": " << n;
            m1 = false;
        }
        o << "}, \"by_size\": {";
        m1 = true;
        for (auto &[cls, fr] : k.by_size) {
            o << (m1 ? "" : ", ") << "\"" << cls << "\": {\"frames\": " << fr.first << ", \"retries\": " << fr.second << "}";
            m1 = false;
        }
        o << "}}";
        first = false;
    }
    o << "}, \"mac_drops\": {";
    first = true;
    for (auto &[reason, n] : g.mac_drops) {
        o << (first ? "" : ", ") << "\"" << reason << "\": " << n;
        first = false;
    }
    o << "}, \"phy_rx_begun\": " << g_phy_rx_begun << ", \"phy_rx_failures\": {";
    first = true;
    for (auto &[reason, n] : g.phy_rx_failures) {
        o << (first ? "" : ", ") << "\"" << json_escape(reason) << "\": " << n;
        first = false;
    }
    o << "}, \"ports\": {";
    first = true;
    for (auto &[name, p] : g.ports) {
        o << (first ? "" : ", ") << "\"" << json_escape(name) << "\": {\"from_kernel\": " << p.from_kernel
          << ", \"to_kernel\": " << p.to_kernel << ", \"to_kernel_group\": " << p.to_kernel_group
          << ", \"dropped_down\": " << p.dropped_down << "}";
        first = false;
    }
    o << "}, \"airtime_by_station\": {";
    first = true;
    for (auto &[name, a] : g_airtime) {
        o << (first ? "" : ", ") << "\"" << json_escape(name) << "\": {\"frames\": " << a.frames
          << ", \"retries\": " << a.retries << ", \"airtime_s\": " << a.airtime_s
          << ", \"first_ppdus\": " << a.first_ppdus << ", \"first_airtime_s\": " << a.first_airtime_s << "}";
        first = false;
    }
    o << "}, \"channel_access_ms\": {";
    first = true;
    for (auto &[name, samples] : g_access_ns) {
        std::vector<uint32_t> v = samples;
        double sum = 0;
        size_t deferred = 0;
        for (uint32_t ns : v) sum += ns, deferred += ns >= g_aifs_ns[name];
        o << (first ? "" : ", ") << "\"" << json_escape(name) << "\": {\"frames\": " << v.size()
          << ", \"aifs_us\": " << g_aifs_ns[name] / 1e3 << ", \"deferred\": " << deferred
          << ", \"mean\": " << (v.empty() ? 0.0 : sum / v.size() / 1e6) << ", \"p50\": " << percentile(v, 0.5) / 1e3
          << ", \"p90\": " << percentile(v, 0.9) / 1e3 << ", \"max\": " << percentile(v, 1.0) / 1e3 << "}";
        first = false;
    }
    o << "}, \"power_save\": {\"beacon_interval_tu\": " << g.cfg.beacon_interval_tu << ", \"dtim_period\": "
      << g.cfg.dtim_period << ", \"listen_interval\": " << g.cfg.listen_interval << ", \"beacons\": " << g_ps.beacons
      << ", \"dtim_beacons\": " << g_ps.dtim_beacons << ", \"group_frames_buffered\": " << g_ps.group_frames_buffered
      << ", \"stations\": {";
    first = true;
    for (auto &[addr, st] : g_ps.stations) {
        double doze_s = st.doze_s + (st.dozing ? (Simulator::Now() - st.doze_since).GetSeconds() : 0.0);
        o << (first ? "" : ", ") << "\"" << json_escape(st.name) << "\": {\"timeout_ms\": " << st.timeout_s * 1000
          << ", \"dozing\": " << (st.dozing ? "true" : "false") << ", \"dozes\": " << st.dozes << ", \"doze_s\": " << doze_s
          << ", \"wakes_tim\": " << st.wakes_tim << ", \"wakes_tx\": " << st.wakes_tx
          << ", \"frames_buffered\": " << st.frames_buffered << "}";
        first = false;
    }
    uint64_t up = 0, down = 0;
    std::ostringstream each;
    for (auto &other : g_others) {
        up += other.sent_up, down += other.sent_down;
        each << (&other == &g_others.front() ? "" : ", ") << "[" << other.sent_up << ", " << other.sent_down << "]";
    }
    o << "}}, \"other_stations\": {\"count\": " << g_others.size() << ", \"radio\": \""
      << (g.cfg.others_shared_radio ? "shared" : "own") << "\", \"radios\": " << g_other_radios
      << ", \"offered_kbit_each\": " << g.cfg.other_load_kbit << ", \"frame_bytes\": " << OTHER_FRAME_BYTES
      << ", \"sent_up\": " << up << ", \"sent_down\": " << down << ", \"sent_each\": [" << each.str()
      << "]}, \"beacon_log\": [";
    first = true;
    o.precision(15);
    for (auto &[t, dtim] : g_ps.beacon_log) {
        o << (first ? "" : ", ") << "[" << t << ", " << (dtim ? 1 : 0) << "]";
        first = false;
    }
    o << "]}\n";
    std::string tmp = g.cfg.stats_path + ".tmp";
    std::ofstream(tmp) << o.str();
    std::rename(tmp.c_str(), g.cfg.stats_path.c_str());
}

std::map<std::string, StationGlue *> g_glue;
Ptr<WifiRemoteStationManager> g_ap_manager;

/* When the ACK of an association response is lost, ns-3's access point marks the station as not
 * associated while the station, which got the response, is: the access point then drops every
 * unicast frame to it, for good. A real access point answers the station's next frame with a
 * deauthentication and the station associates again (IEEE 802.11-2016: class 3 frame from a
 * nonassociated station); ns-3 3.37 has no such recovery, so the access point's record is set
 * to what the station knows, and each repair is counted. */
void repair_associations() {
    for (auto &[name, glue] : g_glue) {
        auto sta = DynamicCast<StaWifiMac>(glue->wifi->GetMac());
        Mac48Address addr = Mac48Address::ConvertFrom(glue->wifi->GetAddress());
        if (sta->IsAssociated() && !g_ap_manager->IsAssociated(addr)) {
            g_ap_manager->RecordGotAssocTxOk(addr);
            g.association_repairs++;
        }
    }
}

std::string handle(const std::string &line) {
    std::istringstream in(line);
    std::string verb, name;
    in >> verb >> name;
    if (verb == "stats") {
        write_stats();
        return "ok";
    }
    if ((verb == "down" || verb == "up") && g_glue.count(name)) {
        g_glue[name]->down.store(verb == "down");
        return "ok";
    }
    if (verb == "ap-forget" && g_glue.count(name) && g_ap_manager) {  // the state a lost association-response ACK leaves
        g_ap_manager->RecordDisassociated(Mac48Address::ConvertFrom(g_glue[name]->wifi->GetAddress()));
        return "ok";
    }
    return "error unknown command: " + line;
}

/* Every millisecond of simulated time: the lag sample, stdin commands, the end of input. */
void tick() {
    record_lag();
    // every 100 ms: repair associations; ready once every station was associated at two checks
    // in a row (the access point's retries of an association response end well within 100 ms)
    static uint64_t ticks = 0;
    static int settled = 0;
    if (++ticks % 100 == 0) {
        if (!g.cfg.adhoc) repair_associations();
        bool linked = g.cfg.adhoc || g.associated == g.cfg.stations.size() + g_other_radios;  // an IBSS needs no association
        settled = linked ? settled + 1 : 0;
        if (!g.ready && settled >= 2) {
            g.ready = true;
            std::cout << "ready" << std::endl;
        }
    }
    std::deque<std::string> pending;
    {
        std::lock_guard<std::mutex> lock(g.cmd_lock);
        pending.swap(g.commands);
    }
    for (auto &line : pending) std::cout << handle(line) << std::endl;
    if (g.eof.load()) {
        Simulator::Stop();
        return;
    }
    if (!g.ready && Simulator::Now().GetSeconds() > g.cfg.assoc_timeout_s)
        fail("stations not associated with the access point after " + std::to_string(g.cfg.assoc_timeout_s) +
             " s (too far for the lowest rate?)");
    Simulator::Schedule(MilliSeconds(1), &tick);
}

void read_stdin() {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::lock_guard<std::mutex> lock(g.cmd_lock);
        g.commands.push_back(line);
    }
    g.eof.store(true);
}

LinkConfig::Port parse_port(const std::string &value, bool named) {
    std::vector<std::string> parts;
    std::stringstream ss(value);
    std::string part;
    while (std::getline(ss, part, ':')) parts.push_back(part);
    if (parts.size() != (named ? 3u : 2u)) fail("bad port " + value + (named ? " (NAME:NETNS:TAP)" : " (NETNS:TAP)"));
    return named ? LinkConfig::Port{parts[0], parts[1], parts[2]} : LinkConfig::Port{"ap", parts[0], parts[1]};
}

LinkConfig parse_args(int argc, char **argv) {
    LinkConfig c;
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        size_t eq = arg.find('=');
        if (arg.rfind("--", 0) != 0 || eq == std::string::npos) fail("bad argument " + arg + " (--key=value)");
        std::string key = arg.substr(2, eq - 2), v = arg.substr(eq + 1);
        if (key == "stats") c.stats_path = v;
        else if (key == "standard") c.standard = v;
        else if (key == "band") c.band_ghz = std::stoi(v);
        else if (key == "channel") c.channel = std::stoi(v);
        else if (key == "distance") c.distance_m = std::stod(v);
        else if (key == "exponent") c.exponent = std::stod(v);
        else if (key == "reference-loss") c.reference_loss_db = std::stod(v);
        else if (key == "fading-m") c.fading_m = std::stod(v);
        else if (key == "seed") c.seed = std::stoul(v);
        else if (key == "run") c.run = std::stoull(v);
        else if (key == "assoc-timeout") c.assoc_timeout_s = std::stod(v);
        else if (key == "beacon-interval-tu") c.beacon_interval_tu = std::stoul(v);
        else if (key == "dtim-period") c.dtim_period = std::max(1ul, std::stoul(v));
        else if (key == "listen-interval") c.listen_interval = std::max(1ul, std::stoul(v));
        else if (key == "ps") {
            size_t colon = v.rfind(':');
            if (colon == std::string::npos) fail("bad --ps=" + v + " (NAME:TIMEOUT_MS)");
            c.ps_timeout_ms[v.substr(0, colon)] = std::stod(v.substr(colon + 1));
        }
        else if (key == "rt-priority") c.rt_priority = std::stoi(v);
        else if (key == "others") c.others = std::stoul(v);
        else if (key == "other-load-kbit") c.other_load_kbit = std::stod(v);
        else if (key == "others-radio") {
            if (v != "shared" && v != "own") fail("bad --others-radio=" + v + " (shared, own)");
            c.others_shared_radio = v == "shared";
        }
        else if (key == "mac") {
            if (v != "infrastructure" && v != "adhoc") fail("bad --mac=" + v + " (infrastructure, adhoc)");
            c.adhoc = v == "adhoc";
        }
        else if (key == "rate-control") {
            if (v != "minstrel" && v != "constant") fail("bad --rate-control=" + v + " (minstrel, constant)");
            c.constant_rate = v == "constant";
        }
        else if (key == "data-mode") c.data_mode = v;
        else if (key == "sta") c.stations.push_back(parse_port(v, true));
        else if (key == "ap") c.ap = parse_port(v, false);
        else fail("unknown argument --" + key);
    }
    if (c.stats_path.empty() || c.stations.empty()) fail("need --stats=FILE and at least one --sta=NAME:NETNS:TAP");
    if (c.constant_rate && c.data_mode.empty()) fail("--rate-control=constant needs --data-mode=MODE");
    if (c.adhoc && (!c.ap.netns.empty() || !c.ps_timeout_ms.empty() || c.others))
        fail("--mac=adhoc has no access point: no --ap, --ps or --others");
    return c;
}

WifiStandard standard_of(const std::string &name) {
    if (name == "80211a") return WIFI_STANDARD_80211a;
    if (name == "80211g") return WIFI_STANDARD_80211g;
    if (name == "80211n") return WIFI_STANDARD_80211n;
    if (name == "80211ac") return WIFI_STANDARD_80211ac;
    fail("unknown standard " + name + " (80211a, 80211g, 80211n, 80211ac)");
    return WIFI_STANDARD_UNSPECIFIED;
}

/* Free-space loss at 1 m for the channel's centre frequency (Friis): the reference of the
 * log-distance model, as ns-3's default 46.6777 dB is for 5.15 GHz. */
double reference_loss_db(int band_ghz, int channel) {
    double f_hz = band_ghz == 5 ? (5000.0 + 5.0 * channel) * 1e6 : (2407.0 + 5.0 * channel) * 1e6;
    return 20.0 * std::log10(4.0 * M_PI * 1.0 * f_hz / 299792458.0);
}

}  // namespace

int main(int argc, char **argv) {
    g.cfg = parse_args(argc, argv);
    // SCHED_FIFO above the twin's own processes (--rt-priority, fieldtest.realtime: FIELDTEST_REALTIME=0
    // turns it off); before any thread starts, so the FdNetDevice readers inherit it. The
    // simulator sleeps between events, so it cannot starve the machine.
    const char *rt_env = getenv("FIELDTEST_REALTIME");
    sched_param sp{};
    sp.sched_priority = g.cfg.rt_priority;
    g.realtime = !(rt_env && std::string(rt_env) == "0") && sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
    const LinkConfig &cfg = g.cfg;
    bool has_ap_port = !cfg.ap.netns.empty();

    // Real time: ns-3's RealtimeSimulatorImpl (best effort: a late event runs at once, its lateness
    // is the lag recorded); checksums on, as for any ns-3 run that exchanges frames with real hosts
    GlobalValue::Bind("SimulatorImplementationType", StringValue("ns3::RealtimeSimulatorImpl"));
    GlobalValue::Bind("ChecksumEnabled", BooleanValue(true));
    RngSeedManager::SetSeed(cfg.seed);
    RngSeedManager::SetRun(cfg.run);

    std::vector<int> sta_fds;
    std::vector<Mac48Address> sta_macs;
    for (auto &port : cfg.stations) {
        Mac48Address mac;
        sta_fds.push_back(open_tap(port, &mac));
        sta_macs.push_back(mac);
    }
    Mac48Address ap_tap_mac;
    int ap_fd = has_ap_port ? open_tap(cfg.ap, &ap_tap_mac) : -1;

    NodeContainer ap_node, sta_nodes;
    ap_node.Create(1);
    sta_nodes.Create(cfg.stations.size());

    // One channel for the whole BSS (shared airtime: every PPDU occupies it for all stations).
    // Loss: log-distance (ns-3 LogDistancePropagationLossModel; exponent per profile, reference
    // loss Friis at 1 m for the channel) plus optional Nakagami-m fading (ns-3
    // NakagamiPropagationLossModel, drawn independently per frame; m = 1 is Rayleigh).
    YansWifiChannelHelper channel;
    channel.SetPropagationDelay("ns3::ConstantSpeedPropagationDelayModel");
    channel.AddPropagationLoss("ns3::LogDistancePropagationLossModel", "Exponent", DoubleValue(cfg.exponent),
                               "ReferenceDistance", DoubleValue(1.0), "ReferenceLoss",
                               DoubleValue(cfg.reference_loss_db >= 0 ? cfg.reference_loss_db
                                                                      : reference_loss_db(cfg.band_ghz, cfg.channel)));
    if (cfg.fading_m > 0)
        channel.AddPropagationLoss("ns3::NakagamiPropagationLossModel", "m0", DoubleValue(cfg.fading_m), "m1",
                                   DoubleValue(cfg.fading_m), "m2", DoubleValue(cfg.fading_m));

    YansWifiPhyHelper phy;
    phy.SetChannel(channel.Create());
    // Frame errors from SINR, modulation and the number of bits: ns-3 NistErrorRateModel (Pei and
    // Henderson 2010, validated for the 802.11 OFDM modes); a frame's success chance is the
    // chunk success rate over all its bits, so larger frames fail more often at the same SNR
    phy.SetErrorRateModel("ns3::NistErrorRateModel");
    // 20 MHz channel, primary 20 index 0 (ns-3 WifiPhy ChannelSettings {number, width, band, primary})
    std::string band = cfg.band_ghz == 5 ? "BAND_5GHZ" : "BAND_2_4GHZ";
    phy.Set("ChannelSettings", StringValue("{" + std::to_string(cfg.channel) + ", 20, " + band + ", 0}"));
    // Transmit power 16.0206 dBm, noise figure 7 dB, RX sensitivity -101 dBm: ns-3 WifiPhy defaults

    WifiHelper wifi;
    WifiStandard standard = standard_of(cfg.standard);
    wifi.SetStandard(standard);
    // Rate control as Linux mac80211 does by default: Minstrel-HT for HT/VHT, Minstrel for legacy
    // OFDM (ns-3 MinstrelHtWifiManager / MinstrelWifiManager). Retry limits are ns-3's defaults,
    // the standard's dot11ShortRetryLimit 7 and dot11LongRetryLimit 4 (IEEE 802.11-2016 Annex C).
    // Group-addressed frames: the lowest basic rate (ns-3 WifiRemoteStationManager NonUnicastMode
    // default), no acknowledgement and so no retry (IEEE 802.11-2016: group addressed frames are
    // not acknowledged); a station's group frame reaches the AP first as an acknowledged unicast.
    // --rate-control=constant: every unicast data frame at one mode (ns-3 ConstantRateWifiManager
    // DataMode; its ControlMode, the RTS rate, stays ns-3's default), as in Chen 2019's set-up.
    bool ht = standard == WIFI_STANDARD_80211n || standard == WIFI_STANDARD_80211ac;
    if (cfg.constant_rate)
        wifi.SetRemoteStationManager("ns3::ConstantRateWifiManager", "DataMode", StringValue(cfg.data_mode));
    else
        wifi.SetRemoteStationManager(ht ? "ns3::MinstrelHtWifiManager" : "ns3::MinstrelWifiManager");

    // A-MPDU aggregation off (BE_MaxAmpduSize 0): every unicast MPDU is acknowledged on its own.
    // With it on, a block-ack agreement that went wrong at the far distance stalled ns-3 3.37's
    // link for good (88-100 % loss, no drop reported); the twin's frames (commands of about 100
    // bytes at 20 Hz, discovery) would rarely be aggregated anyway.
    Ssid ssid("fieldtest");
    WifiMacHelper mac;
    if (cfg.adhoc)  // one IBSS: frames go straight from station to station (ns-3 AdhocWifiMac)
        mac.SetType("ns3::AdhocWifiMac", "Ssid", SsidValue(ssid), "BE_MaxAmpduSize", UintegerValue(0));
    else
        mac.SetType("ns3::StaWifiMac", "Ssid", SsidValue(ssid), "BE_MaxAmpduSize", UintegerValue(0));
    NetDeviceContainer sta_devs = wifi.Install(phy, mac, sta_nodes);
    NodeContainer other_nodes;
    other_nodes.Create(cfg.others == 0 ? 0 : cfg.others_shared_radio ? 1 : cfg.others);
    NetDeviceContainer other_devs = wifi.Install(phy, mac, other_nodes);
    // beacon interval in TU of 1024 us (IEEE 802.11-2016 9.4.1.3); ns-3's default is 100 TU
    mac.SetType("ns3::ApWifiMac", "Ssid", SsidValue(ssid), "BE_MaxAmpduSize", UintegerValue(0), "BeaconInterval",
                TimeValue(MicroSeconds(1024 * cfg.beacon_interval_tu)));
    NetDeviceContainer ap_devs = cfg.adhoc ? NetDeviceContainer() : wifi.Install(phy, mac, ap_node);

    // AP at the origin; stations at the profile's distance, 1 m apart from each other (they hear
    // each other: no hidden stations). Ad hoc: the host station at the origin in the AP's place
    // (Chen 2019: subscribers at a distance from the publisher), the others at the distance.
    size_t origin_sta = 0;
    for (size_t i = 0; i < cfg.stations.size(); i++)
        if (cfg.stations[i].name == "host") origin_sta = i;
    MobilityHelper mobility;
    Ptr<ListPositionAllocator> pos = CreateObject<ListPositionAllocator>();
    pos->Add(Vector(0, 0, 0));
    for (size_t i = 0, row = 0; i < cfg.stations.size() + cfg.others; i++)
        pos->Add(cfg.adhoc && i == origin_sta ? Vector(0, 0, 0) : Vector(cfg.distance_m, static_cast<double>(row++), 0));
    mobility.SetPositionAllocator(pos);
    mobility.SetMobilityModel("ns3::ConstantPositionMobilityModel");
    mobility.Install(ap_node);
    mobility.Install(sta_nodes);
    mobility.Install(other_nodes);

    FdNetDeviceHelper fd_helper;
    std::vector<StationGlue *> glues;
    for (size_t i = 0; i < cfg.stations.size(); i++) {
        auto *glue = new StationGlue;
        glue->name = cfg.stations[i].name;
        glue->wifi = DynamicCast<WifiNetDevice>(sta_devs.Get(i));
        glue->wifi->SetAddress(sta_macs[i]);
        // the frame exchange manager keeps its own copy (set at install): it must ACK-match the new one
        glue->wifi->GetMac()->GetFrameExchangeManager()->SetAddress(sta_macs[i]);
        glue->tap = DynamicCast<FdNetDevice>(fd_helper.Install(sta_nodes.Get(i)).Get(0));
        glue->tap->SetFileDescriptor(sta_fds[i]);
        glue->tap->SetPromiscReceiveCallback(MakeCallback(&StationGlue::from_kernel, glue));
        glue->wifi->GetMac()->SetForwardUpCallback(MakeCallback(&StationGlue::from_air, glue));
        g.ports[glue->name] = PortStats();
        g_glue[glue->name] = glue;
        glues.push_back(glue);
        if (!cfg.adhoc) watch_association(DynamicCast<StaWifiMac>(glue->wifi->GetMac()));
    }
    if (has_ap_port) {  // the AP bridges its BSS to the wired switch, as a lab AP does
        Ptr<FdNetDevice> wired = DynamicCast<FdNetDevice>(fd_helper.Install(ap_node.Get(0)).Get(0));
        wired->SetFileDescriptor(ap_fd);
        BridgeHelper bridge;
        NetDeviceContainer members(ap_devs.Get(0));
        members.Add(wired);
        bridge.Install(ap_node.Get(0), members);
    }

    g_ap_dev = cfg.adhoc ? nullptr : DynamicCast<WifiNetDevice>(ap_devs.Get(0));
    g_ap_manager = cfg.adhoc ? nullptr : g_ap_dev->GetRemoteStationManager();

    // power save: the stations named by --ps, and the access point's buffer in front of its queues
    for (auto &[name, timeout_ms] : cfg.ps_timeout_ms) {
        if (!g_glue.count(name)) fail("--ps names " + name + ", which is not a station");
        Mac48Address addr = Mac48Address::ConvertFrom(g_glue[name]->wifi->GetAddress());
        PsStation &st = g_ps.stations[addr];
        st.name = name;
        st.timeout_s = timeout_ms / 1000.0;
        st.doze_timer = Simulator::Schedule(Seconds(st.timeout_s), &ps_doze, addr);
    }
    if (!g_ps.stations.empty()) {
        g_ps.ap_mac = g_ap_dev->GetMac();
        g_ps.ap_mac->SetMacQueueScheduler(CreateObject<PsGate>());
    }

    g_other_radios = other_devs.GetN();
    for (uint32_t i = 0; i < other_devs.GetN(); i++) {
        watch_association(DynamicCast<StaWifiMac>(DynamicCast<WifiNetDevice>(other_devs.Get(i))->GetMac()));
    }
    for (uint32_t i = 0; i < cfg.others; i++) {
        Ptr<WifiNetDevice> dev = DynamicCast<WifiNetDevice>(other_devs.Get(cfg.others_shared_radio ? 0 : i));
        auto gap = CreateObject<ExponentialRandomVariable>();
        // each direction offers half the load: mean gap = frame bits / (load / 2)
        double per_direction_bps = cfg.other_load_kbit * 1000.0 / 2.0;
        gap->SetAttribute("Mean", DoubleValue(per_direction_bps > 0 ? OTHER_FRAME_BYTES * 8.0 / per_direction_bps : 1.0));
        g_others.push_back(OtherStation{dev, gap});
    }
    for (size_t i = 0; i < g_others.size() && cfg.other_load_kbit > 0; i++)
        for (bool uplink : {true, false})
            Simulator::Schedule(Seconds(g_others[i].gap_s->GetValue()), &other_send, i, uplink);

    std::vector<std::pair<Ptr<WifiNetDevice>, std::string>> transmitters;
    if (g_ap_dev) transmitters.emplace_back(g_ap_dev, "ap");
    for (auto *glue : glues) {
        transmitters.emplace_back(glue->wifi, glue->name);
        g_aifs_ns[glue->name] = aifs_ns(glue->wifi);
    }
    for (uint32_t i = 0; i < other_devs.GetN(); i++)
        transmitters.emplace_back(DynamicCast<WifiNetDevice>(other_devs.Get(i)),
                                  cfg.others_shared_radio ? "others" : "other" + std::to_string(i + 1));
    for (auto &[dev, name] : transmitters) {
        auto *source = new TxSource{dev->GetPhy(), name};
        dev->GetPhy()->TraceConnectWithoutContext("PhyTxPsduBegin", MakeBoundCallback(&on_tx_psdu, source));
        dev->GetPhy()->TraceConnectWithoutContext("PhyRxDrop", MakeCallback(&on_rx_drop));
        dev->GetPhy()->TraceConnectWithoutContext("PhyRxBegin", MakeCallback(&on_rx_begin));
        dev->GetMac()->TraceConnectWithoutContext("DroppedMpdu", MakeCallback(&on_mac_drop));
    }
    // the rate control as ns-3 runs it, read back from the station's manager (the AP's is the same)
    Ptr<WifiRemoteStationManager> manager = glues.front()->wifi->GetRemoteStationManager();
    g.basic_mode = manager->GetNonUnicastMode().GetUniqueName();
    g.rate_manager = manager->GetInstanceTypeId().GetName();
    if (cfg.constant_rate) {
        WifiModeValue data, control;
        manager->GetAttribute("DataMode", data);
        manager->GetAttribute("ControlMode", control);
        g.data_mode = data.Get().GetUniqueName();
        g.control_mode = control.Get().GetUniqueName();
    }

    std::thread(read_stdin).detach();
    g.wall_start = monotonic_s();
    Simulator::Schedule(MilliSeconds(1), &tick);
    Simulator::Run();
    write_stats();
    Simulator::Destroy();
    std::cout.flush();
    std::_Exit(0);  // the stdin reader and FdNetDevice threads may still block in read()
}
