"""Fuzz-style tests over every parser (issue 8: a wrong value is worse than an error).

Every ``parse``/``parse_*`` function of every module in ``_parsers/`` is found at run time, so parsers
added later are covered without a change here. Each one gets empty, blank and binary input, a
sample of every other tool's output, every line-boundary prefix of the fixtures it reads (real
ones from ../shared/fixtures/real and the repository's own), every character prefix of the small
ones, and its JSON fixtures with values of other types. Each call ends in a result or a
ParseError, never another exception; a prefix never yields a version the whole text does not
hold (a shortened "535.161" of 535.161.08), and never a pass / done that the whole text does not.
A prefix that ends inside a line (issue: a cut line is not a whole value) is refused, read as if
that line were not there, or read as that line whole: never a shorter Xid, UUID or PCI bus id.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import pkgutil
import random
import re

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _parsers
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError

from tests.conftest import OWN, REAL

# The parsers DESIGN.md section 3 promises; discovery must find at least these.
PROMISED = {
    "nvsmi.parse_xml",
    "nvsmi.parse_query_csv",
    "procfs.parse_driver_version",
    "fabricmanager.parse_version",
    "fabricmanager.parse_mismatch",
    "xid.parse_kernel_log",
    "dcgm.parse_diag",
    "nccl.parse_tests",
    "gpuburn.parse",
    "mlx.parse_fwmanager_xml",
    "mlx.parse_fwmanager_text",
    "mlx.parse_flint_query",
    "mlx.parse_fwreset_query",
    "nvfwupd.parse_show_version",
}
OWNED_MAX_CHARS = 64_000  # fixtures a parser is tried on for prefixes (larger ones: only whole)
LINE_PREFIXES = 80  # at most this many line-boundary prefixes per file (evenly spread), all of a smaller file
CHAR_PREFIX_MAX_CHARS = 1_500  # every character prefix of files up to this size
VERSION = re.compile(r"\d+(?:\.\d+)+")
GOOD = {"result": ("pass",), "status": ("done",)}


def _discover():
    found = {}
    for info in pkgutil.iter_modules(_parsers.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{_parsers.__name__}.{info.name}")
        for name, func in vars(module).items():
            if not (name == "parse" or name.startswith("parse_")) or not inspect.isfunction(func) or func.__module__ != module.__name__:
                continue
            found[f"{info.name}.{name}"] = func
    return dict(sorted(found.items()))


PARSERS = _discover()


def _one_argument(func):
    required = [p for p in inspect.signature(func).parameters.values() if p.default is inspect.Parameter.empty]
    return len(required) == 1


CALLABLE = {name: func for name, func in PARSERS.items() if _one_argument(func)}


def _fixture_files():
    files = []
    for base in (REAL, OWN):
        if base.is_dir():
            files.extend(path for path in sorted(base.rglob("*")) if path.is_file())
    return files


FILES = _fixture_files()


@functools.lru_cache(maxsize=None)
def _text(path):
    return path.read_text(encoding="utf-8", errors="replace")


def _label(path):
    return str(path.relative_to(REAL if path.is_relative_to(REAL) else OWN.parent))


def _call(name, text):
    """The parser's result, or None for a ParseError; any other exception fails the test, naming the input."""
    try:
        return CALLABLE[name](text)
    except ParseError:
        return None
    except Exception as exc:  # the point of the test: anything but ParseError fails
        pytest.fail(f"{name} raised {type(exc).__name__}: {exc} on input {text[:120]!r}...{text[-120:]!r} ({len(text)} chars)")


@functools.lru_cache(maxsize=None)
def _attempt(name, path):
    """(result or None, the unexpected exception or None) of a parser on a whole fixture; never raises (it runs at collection)."""
    try:
        return CALLABLE[name](_text(path)), None
    except ParseError:
        return None, None
    except Exception as exc:  # reported by test_whole_fixtures
        return None, exc


def _whole(name, path):
    return _attempt(name, path)[0]


def _versions(value, key="version", found=None):
    """Every (key, version-like string) in a parser's result (a bare string result, such as fabric manager's, counts as a version)."""
    found = set() if found is None else found
    if isinstance(value, dict):
        for name, item in value.items():
            _versions(item, name, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _versions(item, key, found)
    elif isinstance(value, str) and key is not None and ("version" in str(key) or str(key).startswith(("fw_", "pxe_", "uefi_"))):
        if VERSION.fullmatch(value):
            found.add((str(key), value))
    return found


def _verdicts(result):
    if not isinstance(result, dict):
        return {}
    return {key: result.get(key) for key in GOOD if isinstance(result.get(key), str)}


def _check_prefix(name, whole, prefix_result, prefix):
    if prefix_result is None:
        return
    extra = _versions(prefix_result) - _versions(whole)
    assert not extra, f"{name}: a prefix yields versions the whole text does not hold {sorted(extra)}: {prefix[-160:]!r}"
    for key, value in _verdicts(prefix_result).items():
        if value in GOOD[key]:
            assert _verdicts(whole).get(key) == value, f"{name}: a prefix says {key} {value!r}, the whole text {_verdicts(whole).get(key)!r}: {prefix[-160:]!r}"


def _owned():
    """(parser, fixture) pairs where the parser reads something out of the whole fixture: the prefix tests run on these.

    An empty answer (no Xid line in another tool's output, no CSV row) does not count: its prefixes say nothing more.
    """
    pairs = []
    for path in FILES:
        if len(_text(path)) > OWNED_MAX_CHARS:
            continue
        for name in CALLABLE:
            if _whole(name, path):
                pairs.append((name, path))
    return pairs


def _sample_of_each_folder():
    """One small and one large fixture of every fixture folder: other tools' output for every parser."""
    folders = {}
    for path in FILES:
        folders.setdefault(path.parent, []).append(path)
    sample = []
    for paths in folders.values():
        by_size = sorted(paths, key=lambda p: len(_text(p)))
        sample.extend({by_size[0], by_size[-1]})
    return sorted(sample)


def _params(pairs):
    if not pairs:
        return [pytest.param(None, None, marks=pytest.mark.skip(reason="no fixtures: ../shared/fixtures/real and tests/fixtures are absent"))]
    return [pytest.param(name, path, id=f"{name}:{_label(path)}") for name, path in pairs]


OWNED = _owned()


# The modules whose parsers this file was written with: each must be exercised by some fixture.
# A parser module added later is fuzzed all the same; a gap in its fixtures is reported as a skip.
KNOWN_MODULES = {"nvsmi", "procfs", "fabricmanager", "xid", "dcgm", "nccl", "gpuburn", "mlx", "nvfwupd", "imex"}
KNOWN_MODULES |= {"ofed", "infiniband", "kmod", "secureboot", "dkms", "dcgm_version"}  # the node's stack (issue 24)


def test_every_parser_is_found():
    assert PROMISED <= set(PARSERS), f"discovery missed {sorted(PROMISED - set(PARSERS))}"
    known = {name for name in PARSERS if name.split(".")[0] in KNOWN_MODULES}
    assert known <= set(CALLABLE), f"parsers that need more than the text: {sorted(known - set(CALLABLE))}"


NEED_MORE = sorted(set(PARSERS) - set(CALLABLE)) or [pytest.param(None, marks=pytest.mark.skip(reason="every parser takes the text alone"))]


@pytest.mark.parametrize("name", NEED_MORE)
def test_parser_that_needs_more_than_the_text(name):
    pytest.skip(f"{name} needs more arguments than the text: not fuzzed here")


@pytest.mark.parametrize("name", sorted(CALLABLE))
def test_parser_reads_some_fixture(name):
    if not FILES:
        pytest.skip("no fixtures")
    exercised = any(owner == name for owner, _path in OWNED)
    if not exercised and name.split(".")[0] not in KNOWN_MODULES:
        pytest.skip(f"{name}: no fixture is read by it, so no prefix is tried: add one to tests/fixtures")
    if not exercised and not REAL.is_dir():
        pytest.skip(f"{name}: its fixtures are the real captures, and ../shared/fixtures/real is absent")
    assert exercised, f"{name}: no fixture is read by it, so no prefix is tried"


_RANDOM = random.Random(8)  # noqa: S311 - reproducible test input, not a secret
DEGENERATE = {
    "empty": "",
    "blank": " \n\t\r\n  \n",
    "newlines": "\n" * 10_000,
    "nul": "\x00" * 64,
    "bom": "\ufeff",
    "binary": bytes(_RANDOM.randrange(256) for _byte in range(4096)).decode("latin-1"),
    "utf8-garbage": bytes(_RANDOM.randrange(256) for _byte in range(4096)).decode("utf-8", errors="replace"),
    "long-line": "x" * 200_000,
    "spaces": " " * 200_000 + "x",
    "braces": "{" * 5000 + "[" * 5000,
    "pipes": "|" * 50_000,
    "typographic": "don\u2019t \u201cmatch\u201d \u2013 \u00a0\u2009 caf\u00e9 \u2026\n",
    # Bytes that are no UTF-8, as run_command's surrogateescape keeps them (issue 21: an XML parser cannot encode them).
    "surrogates": "<?xml version='1.0'?>\n<nvidia_smi_log>\udcff</nvidia_smi_log>\n<Devices>\udc80</Devices>\n{\"a\": \"\udcff\"}\n",
}


@pytest.mark.parametrize("name", sorted(CALLABLE))
@pytest.mark.parametrize("kind", sorted(DEGENERATE))
def test_degenerate_input(name, kind):
    _call(name, DEGENERATE[kind])


@pytest.mark.parametrize("name", sorted(CALLABLE))
def test_other_tools_output(name):
    """A sample of every fixture folder, whole and with binary noise inserted: a result or a ParseError."""
    sample = _sample_of_each_folder()
    if not sample:
        pytest.skip("no fixtures")
    noise = random.Random(name)  # noqa: S311 - reproducible test input, not a secret
    for path in sample:
        text = _text(path)
        _call(name, text)
        cut = noise.randrange(len(text) + 1)
        _call(name, text[:cut] + "\x00\xff\ufffd" + text[cut:])


@pytest.mark.parametrize("name", sorted(CALLABLE))
def test_whole_fixtures(name):
    """Every fixture of every tool, whole: a result or a ParseError."""
    crashes = []
    for path in FILES:
        exc = _attempt(name, path)[1] if len(_text(path)) <= OWNED_MAX_CHARS else None
        if exc is not None:
            crashes.append(f"{_label(path)}: {type(exc).__name__}: {exc}")
    assert not crashes, f"{name} raised on whole fixtures: {crashes[:5]}"


def _line_prefixes(text):
    ends = [match.end() for match in re.finditer(r"\n", text)]
    if len(ends) > LINE_PREFIXES:
        step = len(ends) / LINE_PREFIXES
        ends = [ends[int(i * step)] for i in range(LINE_PREFIXES)]
    return [text[:end] for end in ends if end < len(text)]


@pytest.mark.parametrize(("name", "path"), _params(OWNED))
def test_line_boundary_prefixes(name, path):
    text = _text(path)
    whole = _whole(name, path)
    for prefix in _line_prefixes(text):
        _check_prefix(name, whole, _call(name, prefix), prefix)


SMALL_VERSIONED = [(name, path) for name, path in OWNED if len(_text(path)) <= CHAR_PREFIX_MAX_CHARS and _versions(_whole(name, path))]


@pytest.mark.parametrize(("name", "path"), _params(SMALL_VERSIONED))
def test_character_prefixes_never_shorten_a_version(name, path):
    text = _text(path)
    whole = _whole(name, path)
    for end in range(len(text)):
        _check_prefix(name, whole, _call(name, text[:end]), text[:end])


def _json_start(text):
    match = re.search(r"(?m)^[ \t]*[\[{]", text)
    if not match:
        return None
    try:
        document, end = json.JSONDecoder().raw_decode(text, match.end() - 1)
    except ValueError:
        return None
    return text[: match.end() - 1], document, text[end:]


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


def _replaced(document, path, new):
    if not path:
        return new
    copy = json.loads(json.dumps(document))
    node = copy
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = new
    return copy


ODD_VALUES = (None, -1, 1.5, True, "x", [], {}, ["x"], {"x": 1})
JSON_PATHS = 50  # values replaced per document (evenly spread over its paths)
JSON_OWNED = [(name, path) for name, path in OWNED if _json_start(_text(path))]


@pytest.mark.parametrize(("name", "path"), _params(JSON_OWNED))
def test_json_values_of_other_types(name, path):
    """Issue 8: odd JSON (a list where an object belongs, a number for a status) is a ParseError, not a TypeError."""
    before, document, after = _json_start(_text(path))
    paths = list(_paths(document))
    if len(paths) > JSON_PATHS:
        paths = [paths[int(i * len(paths) / JSON_PATHS)] for i in range(JSON_PATHS)]
    for place in paths:
        for value in ODD_VALUES:
            _call(name, before + json.dumps(_replaced(document, place, value)) + after)


# --- every character prefix: a cut last line is not a whole value ----------------------------------------------------------

CUT_ALL_MAX_CHARS = 1_000  # every character prefix of a fixture up to this size
CUT_SAMPLE = 40  # of a larger one: this many evenly spread, every one in its last line, and every one inside an identifier
# Where a cut leaves a shorter value that still looks like one: a GPU / MIG UUID, a PCI bus id, an Xid code.
_CUT_TOKENS = (
    re.compile(r"\b(?:GPU|MIG)-[0-9A-Fa-f]+(?:-[0-9A-Fa-f]+)*"),
    re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"),
    re.compile(r"\bS?Xid[ \t]*\([^)\n]{0,64}\):[ \t]*\d+"),
)
_LINE_BREAK = re.compile(r"[\r\n]")  # "\r" too: gpu-burn repaints its progress line after one
# Parser modules the rule has not reached yet (others are reworking them): each is reported as a skip with its reason.
CUT_RULE_PENDING = {
}


# Per parser module: every character prefix up to a larger size (fast parsers), and the values a cut shortens there.
CUT_ALL_MAX_CHARS_FOR = {"mlx": 10_000}
_CUT_TOKENS_FOR = {
    "mlx": (
        re.compile(r"\b[A-Z]{2}_[0-9]{10}\b"),  # a PSID
        re.compile(r"\b[0-9]{1,2}\.[0-9]{1,3}\.[0-9]{4}\b"),  # a firmware, PXE or UEFI version
        re.compile(r"-(?:Not )?[Ss]upported(?:[ \t]*\(default\))?|Update required|-Done|-OK"),  # a verdict
    ),
}


def _cut_points(text, module=None):
    """End positions of the prefixes to try: each ends inside a line (the line-boundary ones are tried above)."""
    if len(text) <= CUT_ALL_MAX_CHARS_FOR.get(module, CUT_ALL_MAX_CHARS):
        points = set(range(1, len(text)))
    else:
        points = {int(i * len(text) / CUT_SAMPLE) for i in range(1, CUT_SAMPLE)}
        body = text.rstrip("\r\n")
        points.update(range(max(body.rfind("\n"), body.rfind("\r")) + 1, len(body) + 1))  # the last line, whole too
        for pattern in _CUT_TOKENS + _CUT_TOKENS_FOR.get(module, ()):
            for match in pattern.finditer(text):
                points.update(range(match.start() + 1, match.end() + 1))
    return sorted(point for point in points if 0 < point < len(text) and text[point - 1] not in "\r\n")


def _identifiers(value, key=None, found=None):
    """Every (key, value) of a UUID, PCI bus id or Xid code in a parser's result."""
    found = set() if found is None else found
    if isinstance(value, dict):
        for name, item in value.items():
            _identifiers(item, name, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _identifiers(item, key, found)
    elif key is not None and value is not None and ("uuid" in str(key) or str(key) in ("pci_bus_id", "bus_id", "xid")):
        found.add((str(key), str(value)))
    return found


# Parser modules whose cut-line test also reads the real captures larger than OWNED_MAX_CHARS (sampled cut points):
# every file under ../shared/fixtures/real that they read at all.
CUT_EVERY_REAL_FILE = {"mlx", "nvfwupd"}
CUT_LARGE = [
    (name, path)
    for path in FILES
    if path.is_relative_to(REAL) and len(_text(path)) > OWNED_MAX_CHARS
    for name in CALLABLE
    if name.split(".")[0] in CUT_EVERY_REAL_FILE and _whole(name, path)
]
CUT_OWNED = [
    pytest.param(name, path, id=f"{name}:{_label(path)}", marks=pytest.mark.skip(reason=CUT_RULE_PENDING[name.split(".")[0]]))
    if name.split(".")[0] in CUT_RULE_PENDING
    else pytest.param(name, path, id=f"{name}:{_label(path)}")
    for name, path in OWNED + CUT_LARGE
] or _params(OWNED)


@pytest.mark.parametrize(("name", "path"), CUT_OWNED)
def test_a_cut_last_line_is_dropped_refused_or_whole(name, path):
    """Every prefix that ends inside a line: a ParseError, the result without that line, or the result of the line whole.

    Never a value the cut made: an Xid 7 of Xid 79, a UUID or PCI bus id cut short, a link read down, a
    Slurm reason without the [user@time] that follows it.
    """
    text = _text(path)
    whole = _whole(name, path)
    around = {}  # line start -> (result without the line, result with the line whole)
    for point in _cut_points(text, name.split(".")[0]):
        prefix = text[:point]
        result = _call(name, prefix)
        if result is None:
            continue
        start = max(text.rfind("\n", 0, point), text.rfind("\r", 0, point)) + 1
        if start not in around:
            end = _LINE_BREAK.search(text, point)
            around[start] = (_call(name, text[:start]), _call(name, text[: end.end() if end else len(text)]))
        dropped, complete = around[start]
        extra = _identifiers(result) - _identifiers(whole)
        assert not extra, f"{name}: a prefix yields identifiers the whole text does not hold {sorted(extra)[:5]}: {prefix[-160:]!r}"
        assert result in (dropped, complete), (
            f"{name}: a prefix cut inside its last line gives a result that is neither without that line nor with it whole: "
            f"{prefix[-160:]!r}"
        )
