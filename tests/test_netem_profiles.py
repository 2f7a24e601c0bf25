"""Link profiles, their validation, and how they turn into netem / forwarder settings (no root needed)."""

import pytest

from fieldtest.netem.forwarder import direction_command
from fieldtest.netem.profiles import (
    GilbertElliott,
    LinkProfile,
    ProfileError,
    builtin_profiles,
    get_profile,
    load_profiles,
    load_profiles_file,
    loss_tolerance,
)
from fieldtest.netem.topology import Topology, TopologyError, netem_args


def test_builtins_cover_the_required_networks_and_say_where_numbers_come_from():
    profiles = builtin_profiles()
    assert {"ethernet", "wifi", "wifi-lossy", "4g"} <= set(profiles)
    for profile in profiles.values():
        assert profile.source, f"{profile.name} has no source"
    assert profiles["ethernet"].expected_rtt_ms() < 1.0
    assert profiles["wifi"].expected_rtt_ms() < profiles["wifi-lossy"].expected_rtt_ms()
    assert profiles["wifi-lossy"].expected_loss() > profiles["wifi"].expected_loss()
    assert profiles["4g"].up.delay_ms > profiles["4g"].down.delay_ms  # LTE uplink is the slower side


def test_gilbert_elliott_stationary_loss_and_burst_length():
    ge = GilbertElliott(p_pct=1, r_pct=25, loss_bad_pct=50)
    assert ge.stationary_loss() == pytest.approx(0.01 / 0.26 * 0.5)
    assert ge.mean_burst_packets() == pytest.approx(4.0)


def test_symmetric_shorthand_and_per_direction_override():
    profile = LinkProfile.model_validate(
        {"name": "mine", "delay_ms": 10, "jitter_ms": 1, "down": {"delay_ms": 3}}
    )
    assert profile.up.delay_ms == 10 and profile.up.jitter_ms == 1
    assert profile.down.delay_ms == 3 and profile.down.jitter_ms == 1
    assert profile.expected_rtt_ms() == 13


def test_user_profiles_from_a_plan_can_extend_a_builtin():
    profiles = load_profiles({"far-wifi": {"extends": "wifi", "loss_pct": 5, "up": {"delay_ms": 9}}})
    far = profiles["far-wifi"]
    assert far.up.delay_ms == 9 and far.down.delay_ms == profiles["wifi"].down.delay_ms
    assert far.up.loss_pct == 5 and far.down.loss_pct == 5
    assert far.up.rate_kbit == profiles["wifi"].up.rate_kbit
    assert get_profile("far-wifi", {"far-wifi": {"extends": "wifi"}}).name == "far-wifi"


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"bad": {"delay_ms": -1}}, "up.delay_ms"),
        ({"bad": {"up": {"loss_pct": 120}}}, "up.loss_pct"),
        ({"bad": {"up": {"delai_ms": 3}}}, "delai_ms"),
        ({"bad": {"extends": "nope"}}, "unknown profile 'nope'"),
        ({"bad": 3}, "must be a mapping"),
    ],
)
def test_bad_profiles_give_one_line_errors_naming_the_source(spec, fragment):
    with pytest.raises(ProfileError) as info:
        load_profiles(spec, origin="plan.yaml")
    message = str(info.value)
    assert message.startswith("plan.yaml: ") and fragment in message and "\n" not in message


def test_unknown_profile_name_lists_the_known_ones():
    with pytest.raises(ProfileError, match="known: .*wifi"):
        get_profile("wlan")


def test_profiles_file_errors_name_the_file(tmp_path):
    path = tmp_path / "links.yaml"
    path.write_text("profiles:\n  slow: {delay_ms: 50, rate_kbit: 0}\n")
    with pytest.raises(ProfileError, match=f"^{path}: profile 'slow': up.rate_kbit"):
        load_profiles_file(path)
    path.write_text("profiles: [unclosed\n")
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profiles_file(path)
    path.write_text("profiles:\n  slow: {delay_ms: 50}\n")
    assert load_profiles_file(path)["slow"].expected_rtt_ms() == 100


def test_netem_arguments_keep_order_and_combine_losses():
    wifi = get_profile("wifi")
    args = netem_args(wifi.up, wifi)
    assert args[:3] == ["netem", "limit", "1000"]
    assert "delay" in args and "4000us" in args and "distribution" in args
    assert args[args.index("rate") + 1] == "50000kbit"
    lossy = get_profile("wifi-lossy")
    gemodel = netem_args(lossy.up, lossy)
    assert gemodel[gemodel.index("loss") + 1] == "gemodel"
    # random loss folded into both states: bad 1-(0.98*0.5) = 51 %, good 2 %
    assert gemodel[gemodel.index("gemodel") + 1 : gemodel.index("gemodel") + 5] == ["1%", "25%", "51%", "2%"]
    jitter_only = LinkProfile(name="j", up={"delay_ms": 5, "jitter_ms": 2})
    assert "rate" in netem_args(jitter_only.up, jitter_only)  # netem keeps FIFO order only with a rate
    reordering = LinkProfile(name="j", up={"delay_ms": 5, "jitter_ms": 2}, reorder=True)
    assert "rate" not in netem_args(reordering.up, reordering)
    assert netem_args(wifi.up, wifi, outage=True)[-4:-2] == ["random", "100%"]


def test_forwarder_command_carries_every_setting():
    lossy = get_profile("wifi-lossy")
    line = direction_command("a2b", lossy.up, lossy)
    fields = dict(item.split("=") for item in line.split()[2:])
    assert line.startswith("set a2b ")
    assert float(fields["delay_ns"]) == 8e6 and float(fields["jitter_ns"]) == 5e6
    assert float(fields["tau_ns"]) == 40e6  # auto: 8 x jitter
    assert float(fields["loss"]) == pytest.approx(0.02) and float(fields["ge_p"]) == pytest.approx(0.01)
    assert float(fields["rate_bps"]) == 6e6 and fields["limit"] == "300"
    assert fields["multicast"] == "1" and fields["reorder"] == "0"


def test_loss_tolerance_widens_for_bursty_loss():
    ge = GilbertElliott(p_pct=1, r_pct=25, loss_bad_pct=50)
    assert loss_tolerance(0.05, 200, ge) > loss_tolerance(0.05, 200) > loss_tolerance(0.05, 2000)


def test_80211_profiles_name_their_model_and_refuse_configured_impairments():
    far = get_profile("wifi-80211-far").wifi80211
    near = get_profile("wifi-80211").wifi80211
    assert far.distance_m > near.distance_m and far.nakagami_m == 1.0  # Rayleigh at the far one
    assert "--standard=80211n" in far.program_args() and "--fading-m=1" in far.program_args()
    user = load_profiles({"mine": {"extends": "wifi-80211", "wifi80211": {"distance_m": 30}}})["mine"]
    assert user.wifi80211.distance_m == 30 and user.wifi80211.nakagami_m == near.nakagami_m
    with pytest.raises(ProfileError, match="'bad': profile: .*leave out delay"):
        load_profiles({"bad": {"extends": "wifi-80211", "delay_ms": 3}})
    with pytest.raises(ProfileError, match="802.11a runs in 5 GHz, not 2.4 GHz"):
        load_profiles({"bad": {"wifi80211": {"standard": "802.11a", "band_ghz": 2.4, "distance_m": 5}}})


def test_chens_radio_is_80211a_ad_hoc_at_a_fixed_54_mbits_and_each_setting_reaches_wifi_link():
    chen = get_profile("wifi-80211a-adhoc").wifi80211
    args = chen.program_args()
    for arg in ("--standard=80211a", "--mac=adhoc", "--rate-control=constant", "--data-mode=OfdmRate54Mbps",
                "--reference-loss=46.6777"):  # fmt: skip
        assert arg in args
    assert not any(a.startswith("--fading-m") for a in args)  # ns-3's default channel has no fading
    plain = get_profile("wifi-80211").wifi80211.program_args()
    assert "--mac=infrastructure" in plain and "--rate-control=minstrel" in plain
    assert not any(a.startswith(("--data-mode", "--reference-loss")) for a in plain)
    moved = load_profiles({"c": {"extends": "wifi-80211a-adhoc", "wifi80211": {"distance_m": 25.75}}})["c"]
    assert "--distance=25.75" in moved.wifi80211.program_args() and moved.wifi80211.mac == "adhoc"
    with pytest.raises(TopologyError, match="no access point to reach the wired nodes mocap"):
        Topology("wifi-80211a-adhoc", nodes=["host", "robot", "mocap"], wireless=("host", "robot"))


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"rate_control": "constant"}, "needs a data_mode"),
        ({"data_mode": "OfdmRate54Mbps"}, "needs a data_mode, and only it"),
        ({"rate_control": "constant", "data_mode": "HtMcs7"}, "'HtMcs7' is not a 802.11a rate"),
        ({"mac": "adhoc", "other_stations": 2}, "ad hoc link has no access point"),
        ({"power_save": {"robot": 100}}, "power_save needs 802.11n"),
    ],
)
def test_fixed_rate_and_ad_hoc_settings_refuse_what_ns3_cannot_run(fields, fragment):
    spec = {"wifi80211": {"standard": "802.11a", "band_ghz": 5, "distance_m": 20, **fields}}
    with pytest.raises(ProfileError, match=fragment):
        load_profiles({"bad": spec})
