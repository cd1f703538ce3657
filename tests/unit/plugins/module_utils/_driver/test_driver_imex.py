"""GB200 / GB300 tray decisions of the driver: IMEX pinned to the driver, nodes_config.cfg, module parameters (CDMM), the checks
after activation (issue 23)."""

from __future__ import annotations

import pathlib

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver import imex
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.plan import PlanError, diff, plan
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import nvlink
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers import imex as imex_parser

REAL = pathlib.Path(__file__).resolve().parents[5].parent / "shared" / "fixtures" / "real" / "gb200" / "imex"
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason="../shared/fixtures/real/gb200/imex is absent (the real captures beside the checkout)")


@pytest.mark.parametrize(
    ("option", "installed", "wanted"),
    [("auto", True, True), ("auto", False, None), ("present", False, True), ("absent", True, False), ("skip", True, None)],
)
def test_imex_wanted(option, installed, wanted):
    assert imex.imex_wanted(option, installed) is wanted


def test_imex_wanted_refuses_an_unknown_option():
    with pytest.raises(imex.ImexError, match="imex must be one of"):
        imex.imex_wanted("yes", True)


@pytest.mark.parametrize(
    ("driver", "package"),
    [("570.86.15", "nvidia-imex-570"), ("575.57.08", "nvidia-imex-575"), ("580.95.05", "nvidia-imex"), ("590.48.01", "nvidia-imex")],
)
def test_imex_package_name_by_branch(driver, package):
    assert imex.imex_package(driver) == package


def installed(version="580.95.05", held=True, package="nvidia-imex"):
    return {"version": version, "held": held, "package": package if version else None}


@pytest.mark.parametrize(
    ("node", "target", "wanted", "allow", "action", "after"),
    [
        (installed(), "580.95.05", True, False, "none", "580.95.05"),
        (installed(), "590.48.01", True, False, "upgrade", "590.48.01"),
        (installed(version=None), "590.48.01", True, False, "install", "590.48.01"),
        (installed(held=False), "580.95.05", True, False, "hold", "580.95.05"),
        (installed("570.172.08", package="nvidia-imex-570"), "580.95.05", True, False, "upgrade", "580.95.05"),
        # same version, other package name (a hand-installed nvidia-imex-580): replaced by the driver's own package name
        (installed(package="nvidia-imex-580"), "580.95.05", True, False, "upgrade", "580.95.05"),
        (installed("590.48.01"), "580.95.05", True, True, "downgrade", "580.95.05"),
        (installed(), "590.48.01", None, False, "none", "580.95.05"),
        (installed(), "590.48.01", False, False, "remove", None),
        (installed(), None, True, False, "remove", None),
        (installed(version=None), "590.48.01", False, False, "none", None),
    ],
)
def test_plan_imex(node, target, wanted, allow, action, after):
    result = imex.plan_imex(node, target, wanted, allow_downgrade=allow)
    assert (result["action"], result["after"]) == (action, after)
    assert result["managed"] is (wanted is not None)


def test_plan_imex_refuses_a_newer_imex_without_allow_downgrade():
    with pytest.raises(imex.ImexError, match=r"nvidia-imex 590\.48\.01 is newer than driver 580\.95\.05"):
        imex.plan_imex(installed("590.48.01"), "580.95.05", True)


DRIVER_OPTIONS = {"state": "present", "version": "590.48.01", "kernel_module": "open", "fabricmanager": "auto", "allow_downgrade": False}


def tray(driver="580.95.05", imex_version="580.95.05", present=True):
    return {"driver": {"installed_version": driver, "loaded_version": driver, "flavor": "open", "held": None},
            "fabricmanager": {"version": None}, "nvswitch": False,
            "imex": dict(installed(imex_version), present=present)}


@pytest.mark.parametrize(
    ("node", "options", "driver_action", "imex_action", "changed"),
    [
        (tray(), {"imex": "auto"}, "upgrade", "upgrade", True),
        (tray(driver="590.48.01", imex_version="590.48.01"), {"imex": "auto"}, "none", "none", False),
        # an IMEX one release off on a tray whose driver is right: a change of its own
        (tray(driver="590.48.01", imex_version="580.95.05"), {"imex": "auto"}, "none", "upgrade", True),
        (tray(driver="590.48.01", imex_version="580.95.05"), {"imex": "skip"}, "none", "none", False),
        (tray(driver="590.48.01", imex_version=None, present=False), {"imex": "auto"}, "none", "none", False),
        (tray(driver="590.48.01", imex_version=None, present=False), {"imex": "present"}, "none", "install", True),
        # the driver goes down (allow_downgrade): IMEX goes down with it
        (tray(driver="595.45.04", imex_version="595.45.04"), {"imex": "auto", "allow_downgrade": True}, "downgrade", "downgrade", True),
    ],
)
def test_driver_plan_carries_imex(node, options, driver_action, imex_action, changed):
    result = plan(node, dict(DRIVER_OPTIONS, **options))
    assert (result["driver"]["action"], result["imex"]["action"], result["changed"]) == (driver_action, imex_action, changed)


def test_driver_plan_diff_shows_imex_when_managed():
    result = plan(tray(), dict(DRIVER_OPTIONS, imex="auto"))
    assert diff(result) == {"before": {"driver": "580.95.05", "kernel_module": "open", "imex": "580.95.05"},
                            "after": {"driver": "590.48.01", "kernel_module": "open", "imex": "590.48.01"}}
    assert "imex" not in diff(plan(tray(), dict(DRIVER_OPTIONS, imex="skip")))["after"]


def test_driver_plan_refuses_a_newer_imex_naming_the_option():
    with pytest.raises(PlanError, match="imex: skip"):
        plan(tray(driver="590.48.01", imex_version="595.45.04"), dict(DRIVER_OPTIONS, imex="auto"))


def test_unavailable_message_says_what_to_do():
    message = imex.unavailable_message("nvidia-imex", "590.48.01", "apt")
    assert "nvidia-imex 590.48.01" in message and "Nothing was changed" in message and "nvidia_driver_imex: false" in message


# -- nodes_config.cfg ---------------------------------------------------------------------------------------

@needs_real
def test_nodes_config_text_reads_back_with_the_parser_like_the_real_file():
    real = (REAL / "nodes_config.cfg_example_4-GB200-VMs_crusoe-docs.txt").read_text()
    nodes = imex_parser.parse_nodes_config(real)
    assert imex.nodes_config_text(nodes) == real
    assert imex_parser.parse_nodes_config(imex.nodes_config_text(["tray-01", "10.0.0.2"])) == ["tray-01", "10.0.0.2"]


@pytest.mark.parametrize(
    ("nodes", "match"),
    [
        ([], "nvidia_driver_imex_nodes is empty"),
        (None, "nvidia_driver_imex_nodes is empty"),
        (["10.0.0.1", "10.0.0.1"], r"nvidia_driver_imex_nodes\[1\] repeats 10.0.0.1"),
        (["10.0.0.1", "not an address"], r"nvidia_driver_imex_nodes\[1\] 'not an address' is not an IP address"),
        (["10.0.0.1\n10.0.0.2"], r"\[0\] .* is not an IP address"),
        ([7], r"\[0\] '7' is not an IP address"),
    ],
)
def test_nodes_config_text_refuses(nodes, match):
    with pytest.raises(imex.ImexError, match=match):
        imex.nodes_config_text(nodes)


def test_domain_nodes_in_inventory_order_with_ansible_host():
    hostvars = {
        "nvl-a1": {"nvlink_domain": "rack-a", "ansible_host": "127.0.52.1"},
        "nvl-b1": {"nvlink_domain": "rack-b", "ansible_host": "127.0.52.5"},
        "nvl-a2": {"nvlink_domain": "rack-a"},
        "login": {},
    }
    hosts = ["nvl-a1", "nvl-b1", "nvl-a2", "login"]
    assert imex.domain_nodes(hostvars, hosts, "rack-a") == ["127.0.52.1", "nvl-a2"]
    assert imex.domain_nodes(hostvars, hosts, "rack-b") == ["127.0.52.5"]
    with pytest.raises(imex.ImexError, match="nvlink_domain is not set on this host"):
        imex.domain_nodes(hostvars, hosts, "")


# -- module parameters ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("version", "cdmm", "params", "expected"),
    [
        ("580.95.05", True, {}, {"NVreg_CoherentGPUMemoryMode": "driver"}),
        ("580.95.05", False, {}, {}),
        ("570.172.08", False, {"NVreg_EnableGpuFirmware": 1}, {"NVreg_EnableGpuFirmware": "1"}),
        ("590.48.01", True, {"NVreg_RegistryDwords": "RMFoo=1"},
         {"NVreg_CoherentGPUMemoryMode": "driver", "NVreg_RegistryDwords": "RMFoo=1"}),
    ],
)
def test_module_params(version, cdmm, params, expected):
    assert imex.module_params(version, cdmm, params) == expected


@pytest.mark.parametrize(
    ("version", "cdmm", "params", "match"),
    [
        ("570.172.08", True, {}, "needs R580 or later"),
        ("580.95.05", False, {"CoherentGPUMemoryMode": "driver"}, "is not an NVreg_<Name> parameter"),
        ("580.95.05", False, {"NVreg_X": "a b"}, "must be a number or a word"),
        ("580.95.05", False, {"NVreg_X": "a\noptions nvidia NVreg_Y=1"}, "must be a number or a word"),
        ("580.95.05", False, {"NVreg_X": True}, "must be a number or a word"),
        ("580.95.05", True, {"NVreg_CoherentGPUMemoryMode": "default"}, "set one of them"),
        ("bad", True, {}, "not a whole NVIDIA driver version"),
    ],
)
def test_module_params_refuses(version, cdmm, params, match):
    with pytest.raises(imex.ImexError, match=match):
        imex.module_params(version, cdmm, params)


def test_modprobe_conf_text():
    assert imex.modprobe_conf_text({}) == ""
    text = imex.modprobe_conf_text({"NVreg_A": "1", "NVreg_CoherentGPUMemoryMode": "driver"})
    assert text.splitlines()[-1] == "options nvidia NVreg_A=1 NVreg_CoherentGPUMemoryMode=driver"


def test_param_problems_read_back():
    wanted = {"NVreg_CoherentGPUMemoryMode": "driver"}
    assert imex.param_problems(wanted, {"CoherentGPUMemoryMode": "driver"}) == []
    assert imex.param_problems(wanted, {"CoherentGPUMemoryMode": '"driver"'}) == []
    (problem,) = imex.param_problems(wanted, {"CoherentGPUMemoryMode": "default"})
    assert "NVreg_CoherentGPUMemoryMode=driver does not read back" in problem and "'default'" in problem
    assert imex.param_problems(wanted, {}) != []


# -- verification after activation ---------------------------------------------------------------------------------

NODES = ["10.0.0.1", "10.0.0.2"]
GOOD_FABRIC = {"state": "Completed", "status": "Success", "health": "Healthy"}


def ctl_nodes(marks="C C / C C", versions=("590.48", "590.48"), states=("READY", "READY"), domain_state="UP"):
    rows = [row.split() for row in marks.split(" / ")]
    lines = ["Nodes:"]
    for i, (state, version) in enumerate(zip(states, versions)):
        lines.append(f"Node #{i:<3} - {NODES[i]:<15} - {state:<20} - Version: {version}")
    lines += ["", " Nodes From\\To  0   1"] + [f"{i:>8}        " + "".join(f"{m:<4}" for m in row) for i, row in enumerate(rows)]
    lines += ["", f"Domain State: {domain_state}", ""]
    return imex_parser.parse_ctl_nodes("\n".join(lines))


def facts(fabric=..., imex_version="590.48.01", service="active", domain="up", domain_error=None):
    fabric = GOOD_FABRIC if fabric is ... else fabric
    return {"gpus": [{"index": i, "fabric": dict(fabric) if fabric else None} for i in range(4)],
            "imex": nvlink.imex_facts(imex_version, service, NODES, ctl_nodes() if domain == "up" else domain, "590.48.01",
                                      domain_error=domain_error)}


@pytest.mark.parametrize(
    ("tray_facts", "checks", "text"),
    [
        (facts(), [], ""),
        (facts(fabric={"state": "In Progress", "status": None, "health": None}), ["fabric"] * 4, "In Progress"),
        (facts(fabric={"state": "Completed", "status": "Insufficient Resources", "health": "Healthy"}), ["fabric"] * 4, "Insufficient Resources"),
        (facts(fabric={"state": "Completed", "status": "Success", "health": "Unhealthy"}), ["fabric"] * 4, "Unhealthy"),
        (facts(fabric=None), ["fabric"] * 4, "no Fabric block"),
        (facts(imex_version="580.95.05", service="failed", domain=None, domain_error="exit status 1: Failed to connect"),
         ["imex_version", "imex_service", "imex_domain"], "IMEX refuses to start"),
        (facts(domain=ctl_nodes(marks="C !V! / !V! C", versions=("590.48", "580.95"), domain_state="DOWN")),
         ["imex_domain", "imex_domain"], "!V!"),
        (facts(domain=ctl_nodes(marks="C I / I I", states=("READY", "UNAVAILABLE"), domain_state="DOWN")),
         ["imex_domain", "imex_domain", "imex_domain"], "10.0.0.2 (UNAVAILABLE)"),
        (facts(domain=ctl_nodes(marks="C !M! / !M! C", domain_state="DOWN")), ["imex_domain", "imex_domain"], "node_map_mismatch"),
    ],
)
def test_verify_problems(tray_facts, checks, text):
    problems = imex.verify_problems(tray_facts, "590.48.01", NODES)
    assert [p["check"] for p in problems] == checks
    message = imex.describe(problems, "nvl-a1")
    assert text in message or (text == "!V!" and "version_mismatch" in message)
    assert all(p["fix"] for p in problems)


def test_verify_problems_sees_a_node_the_daemon_does_not_know():
    problems = imex.verify_problems(facts(), "590.48.01", [*NODES, "10.0.0.3"])
    assert [p["problem"] for p in problems] == ["the IMEX daemon does not know 10.0.0.3 of nodes_config.cfg"]


def test_verify_problems_without_the_domain_and_without_imex():
    assert imex.verify_problems(facts(domain=ctl_nodes(domain_state="DOWN")), "590.48.01", NODES, check_domain=False) == []
    missing = {"gpus": [], "imex": nvlink.imex_facts(None, None, None, None, "590.48.01")}
    assert [p["check"] for p in imex.verify_problems(missing, "590.48.01", NODES)] == ["imex_version"]


@needs_real
def test_verify_problems_on_the_real_18_node_capture():
    """AWS's 18-tray capture prints Version: 570.172 for driver 570.172.08: IMEX matches, the domain is UP."""
    domain = imex_parser.parse_ctl_nodes((REAL / "imex-ctl_N_18nodes-UP_Version-570.172_p6e-gb200_aws-parallelcluster-doc.txt").read_text())
    nodes = [node["address"] for node in domain["nodes"]]
    tray_facts = {"gpus": [{"index": 0, "fabric": GOOD_FABRIC}], "imex": nvlink.imex_facts("570.172.08", "active", nodes, domain, "570.172.08")}
    assert imex.verify_problems(tray_facts, "570.172.08", nodes) == []
