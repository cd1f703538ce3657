"""_artifact: URL redaction and secret detection, checksum forms, verify, fetch (download beside dest, verify, then rename)."""

from __future__ import annotations

import hashlib
import os
import random
import re
import stat

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _artifact
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._artifact import (
    ArtifactError,
    fetch,
    is_url,
    parse_checksum,
    redact_url,
    redact_urls_in,
    secret_in_url,
    sha256_file,
    verify,
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pass@example.com/a/NVIDIA.run?X-Amz-Signature=secret", "https://example.com/a/NVIDIA.run"),
        ("https://token@example.com:8443/NVIDIA.run#frag", "https://example.com:8443/NVIDIA.run"),
        ("https://example.com/NVIDIA.run", "https://example.com/NVIDIA.run"),
        ("ftp://u:p@mirror.example.com/x.run?sig=1", "ftp://mirror.example.com/x.run"),
        ("/var/cache/gpufleet/NVIDIA-Linux-x86_64-550.90.07.run", "/var/cache/gpufleet/NVIDIA-Linux-x86_64-550.90.07.run"),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown


def test_redact_urls_in_text():
    text = "Request failed for https://u:pw@example.com/x.run?X-Amz-Signature=abc: <urlopen error timed out> (again https://h/y?t=1)"
    # Punctuation after a query string goes with it: a little too much removed rather than a signature shown.
    assert redact_urls_in(text) == "Request failed for https://example.com/x.run <urlopen error timed out> (again https://h/y"
    assert redact_urls_in(None) == ""


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://u:p@example.com/x.run", "a user name or password"),
        ("https://tok@example.com/x.run", "a user name or password"),
        ("https://b.s3.amazonaws.com/x.run?X-Amz-Credential=AKIA&X-Amz-Signature=s", "parameter X-Amz-Credential"),
        ("https://a.blob.core.windows.net/c/x.run?sv=2022&sig=s", "parameter sig"),
        ("https://example.com/x.run?token=s", "parameter token"),
        ("https://example.com/x.run?Signature=s&Key-Pair-Id=k&Policy=p", "parameter Signature"),
        ("https://storage.googleapis.com/b/x.run?X-Goog-Signature=s", "parameter X-Goog-Signature"),
        ("https://example.com/x.run?my_auth_token=s", "parameter my_auth_token"),
        ("https://example.com/x.run#access_token=s", "parameter access_token"),
    ],
)
def test_secret_in_url_names_the_part_not_the_value(url, reason):
    found = secret_in_url(url)
    assert reason in found
    assert "=s" not in found and "AKIA" not in found


@pytest.mark.parametrize("url", ["https://example.com/x.run", "https://example.com/x.run?version=550.90.07", "/var/cache/x.run"])
def test_secret_in_url_passes_plain_urls_and_paths(url):
    assert secret_in_url(url) is None


@pytest.mark.parametrize(("value", "expected"), [("https://x/y", True), ("HTTP://x/y", True), ("ftp://x/y", True), ("/srv/x.run", False),
                                                 ("file:///srv/x.run", False), (None, False)])
def test_is_url(value, expected):
    assert is_url(value) is expected


@pytest.mark.parametrize("text", ["sha256:" + "AB" * 32, "ab" * 32, "  " + "ab" * 32 + "\n"])
def test_checksum_forms(text):
    assert parse_checksum(text) == "ab" * 32


@pytest.mark.parametrize("text", [None, "md5:" + "ab" * 16, "sha256:" + "ab" * 31, "zz" * 32, "ab" * 32 + "\nab", 42])
def test_checksum_refused(text):
    with pytest.raises(ArtifactError, match="is not a sha256"):
        parse_checksum(text)


def test_verify_and_mismatch(tmp_path):
    path = tmp_path / "fw.bin"
    path.write_bytes(b"firmware")
    good = hashlib.sha256(b"firmware").hexdigest()
    assert sha256_file(path) == good
    assert verify(str(path), "sha256:" + good.upper()) == good
    with pytest.raises(ArtifactError) as caught:
        verify(str(path), "0" * 64, shown="https://u:p@example.com/fw.bin?sig=s")
    assert caught.value.msg.startswith(f"checksum mismatch for https://example.com/fw.bin: sha256 is {good}, expected {'0' * 64}. Nothing was changed")
    assert caught.value.details["sha256"] == good
    with pytest.raises(ArtifactError, match=r"does not exist on the node"):
        verify(str(tmp_path / "missing"), good)


class _Body:
    def __init__(self, *chunks, fail=None):
        self.chunks = [*chunks, b""]
        self.fail = fail

    def read(self, _size):
        if self.fail and len(self.chunks) == 1:
            raise self.fail
        return self.chunks.pop(0)


class _Module:
    def __init__(self):
        self.params = {"url_username": "should-not-be-used"}


def _fake_fetch(monkeypatch, response, info):
    seen = {}

    def fake(module, url, **kwargs):
        seen.update(url=url, params=dict(module.params), **kwargs)
        return response, info

    monkeypatch.setattr(_artifact, "fetch_url", fake)
    return seen


URL = "https://artifacts.example.com/fw/image.fwpkg?X-Amz-Signature=s3cr3t"


def test_fetch_verifies_then_renames(tmp_path, monkeypatch):
    body = b"image" * 1000
    seen = _fake_fetch(monkeypatch, _Body(body[:10], body[10:]), {"status": 200, "msg": "OK"})
    dest = tmp_path / "image.fwpkg"
    got = fetch(_Module(), URL, str(dest), hashlib.sha256(body).hexdigest(), headers={"X-Token": "t"}, url_username="u", url_password="p", timeout=45)  # noqa: S106 (made up)
    assert got == {"path": str(dest), "sha256": hashlib.sha256(body).hexdigest(), "url": "https://artifacts.example.com/fw/image.fwpkg", "redirects": 0}
    assert dest.read_bytes() == body
    assert seen["params"] == {"url_username": "u", "url_password": "p", "force_basic_auth": True, "validate_certs": True, "follow_redirects": "none"}
    assert (seen["headers"], seen["timeout"]) == ({"X-Token": "t"}, 45)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["image.fwpkg"]


def test_fetch_mismatch_leaves_nothing(tmp_path, monkeypatch):
    _fake_fetch(monkeypatch, _Body(b"not the image"), {"status": 200, "msg": "OK"})
    with pytest.raises(ArtifactError) as caught:
        fetch(_Module(), URL, str(tmp_path / "image.fwpkg"), "0" * 64)
    assert caught.value.msg.startswith("checksum mismatch for https://artifacts.example.com/fw/image.fwpkg: sha256 is ")
    assert "s3cr3t" not in caught.value.msg
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("response", "info", "message"),
    [
        (None, {"status": 403, "msg": f"HTTP Error 403: Forbidden for {URL}"}, "cannot download https://artifacts.example.com/fw/image.fwpkg: HTTP 403"),
        (_Body(b"par", fail=TimeoutError(f"read timed out for {URL}")), {"status": 200, "msg": "OK"}, "cannot download https://artifacts.example.com"),
    ],
    ids=["http-403", "timeout-mid-body"],
)
def test_fetch_failures_redact_and_leave_nothing(tmp_path, monkeypatch, response, info, message):
    _fake_fetch(monkeypatch, response, info)
    with pytest.raises(ArtifactError) as caught:
        fetch(_Module(), URL, str(tmp_path / "image.fwpkg"), "0" * 64)
    assert caught.value.msg.startswith(message)
    assert "Nothing was changed" in caught.value.msg and "s3cr3t" not in caught.value.msg
    assert list(tmp_path.iterdir()) == []


def test_fetch_fail_json_of_the_http_client_becomes_an_error(tmp_path, monkeypatch):
    def fake(module, url, **_kwargs):
        module.fail_json(msg=f"Failed to validate the SSL certificate for {url}")

    monkeypatch.setattr(_artifact, "fetch_url", fake)
    with pytest.raises(ArtifactError, match=r"^cannot download https://artifacts\.example\.com/fw/image\.fwpkg: Failed to validate") as caught:
        fetch(_Module(), URL, str(tmp_path / "image.fwpkg"), "0" * 64)
    assert "s3cr3t" not in caught.value.msg


def test_fetch_into_a_folder_that_does_not_exist_is_an_error_not_a_traceback(tmp_path, monkeypatch):
    _fake_fetch(monkeypatch, _Body(b"image"), {"status": 200, "msg": "OK"})
    with pytest.raises(ArtifactError, match=r"^cannot download https://artifacts\.example\.com/fw/image\.fwpkg into .*/missing: "):
        fetch(_Module(), URL, str(tmp_path / "missing" / "image.fwpkg"), "0" * 64)


# The pattern sub_urls replaces (quadratic on long runs of letters), as the reference of what a URL in text is.
_OLD_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


@pytest.mark.parametrize("text", [
    "", "no url here", "see https://u:p@host/x?sig=1 and ftp://a/b", "9http://x", "ab1http://x", "a://", "://x", "http://",
    "x https://a://b y", "'http://a' \"s3://b\"<c://d>", "a+b.c-d://e", "+http://x", "..http://a.b", "http://a\nhttp://b",
    "deadbeef" * 8 + "://x", "a://b://c://d", "é http://x", "A1://b http :// c",
])
def test_sub_urls_finds_what_the_old_pattern_found(text):
    assert _artifact.sub_urls(text, lambda url: f"<{url}>") == _OLD_URL.sub(lambda m: f"<{m.group(0)}>", text)


def test_sub_urls_agrees_with_the_old_pattern_on_random_text():
    rng = random.Random(7)  # noqa: S311 - test data, not a secret
    alphabet = "ab9+.-:/ @'\"<>\n"
    for _case in range(3000):
        text = "".join(rng.choice(alphabet) for _char in range(rng.randrange(0, 40)))
        assert _artifact.sub_urls(text, lambda url: f"<{url}>") == _OLD_URL.sub(lambda m: f"<{m.group(0)}>", text), repr(text)


# -- private_copy: what is verified is what is used ------------------------------------------------------------------


def test_private_copy_verifies_the_bytes_it_copies_into_a_private_folder(tmp_path):
    source = tmp_path / "scratch" / "NVIDIA.run"
    source.parent.mkdir()
    source.write_bytes(b"runfile")
    good = hashlib.sha256(b"runfile").hexdigest()
    copy, sha256 = _artifact.private_copy(str(source), "sha256:" + good, str(tmp_path))
    assert sha256 == good
    assert os.path.basename(copy) == "NVIDIA.run" and os.path.dirname(os.path.dirname(copy)) == str(tmp_path)
    assert stat.S_IMODE(os.stat(os.path.dirname(copy)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(copy).st_mode) == 0o600
    # The source swapped after the check: the copy is still the verified file.
    source.write_bytes(b"evil")
    assert open(copy, "rb").read() == b"runfile"


def test_private_copy_mismatch_leaves_nothing_and_names_no_secret(tmp_path):
    source = tmp_path / "fw.bin"
    source.write_bytes(b"firmware")
    out = tmp_path / "tmp"
    out.mkdir()
    with pytest.raises(ArtifactError) as caught:
        _artifact.private_copy(str(source), "0" * 64, str(out), shown="https://u:p@example.com/fw.bin?sig=s")
    assert caught.value.msg.startswith("checksum mismatch for https://example.com/fw.bin: sha256 is ")
    assert caught.value.details["sha256"] == hashlib.sha256(b"firmware").hexdigest()
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo"])
def test_private_copy_refuses_what_is_not_a_file_without_hanging(tmp_path, kind):
    path = tmp_path / "NVIDIA.run"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # no writer: a blocking open would hang the module
    out = tmp_path / "tmp"
    out.mkdir()
    with pytest.raises(ArtifactError, match=r"NVIDIA\.run does not exist on the node \(or is not a file\)"):
        _artifact.private_copy(str(path), "ab" * 32, str(out))
    assert list(out.iterdir()) == []


def test_private_copy_into_a_folder_that_cannot_hold_it_is_an_error_not_a_traceback(tmp_path):
    source = tmp_path / "fw.bin"
    source.write_bytes(b"firmware")
    with pytest.raises(ArtifactError, match=r"^cannot create a private folder in .*/missing: "):
        _artifact.private_copy(str(source), hashlib.sha256(b"firmware").hexdigest(), str(tmp_path / "missing"))


@pytest.mark.parametrize(
    ("current", "location", "credentials", "expected"),
    [
        ("https://a.example/x", "/y", True, ("https://a.example/y", True)),
        ("https://a.example/x", "https://A.EXAMPLE:443/y", True, ("https://A.EXAMPLE:443/y", True)),
        ("https://a.example/x", "https://a.example:8443/y", True, ("https://a.example:8443/y", False)),
        ("https://a.example/x", "https://b.example/y?sig=s", True, ("https://b.example/y?sig=s", False)),
        ("https://a.example/x", "//b.example/y", True, ("https://b.example/y", False)),
        ("https://a.example/x", "/y", False, ("https://a.example/y", False)),
        ("https://a.example:8443/x", "https://a.example/y", True, ("https://a.example/y", False)),
    ],
)
def test_redirect_target_keeps_credentials_only_within_the_origin(current, location, credentials, expected):
    assert _artifact.redirect_target(current, location, credentials) == expected


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("http://a.example/y", "redirected to http://a.example/y: a download follows redirects only to https://"),
        ("ftp://u:pw@a.example/y?sig=s", "redirected to ftp://a.example/y: a download follows redirects only to https://"),
        ("file:///etc/shadow", "redirected to file:///etc/shadow: a download follows redirects only to https://"),
        ("", "answered with a redirect that names no URL"),
        (None, "answered with a redirect that names no URL"),
    ],
)
def test_redirect_target_refuses_anything_but_https(location, message):
    with pytest.raises(ArtifactError, match=re.escape(message)) as caught:
        _artifact.redirect_target("https://a.example/x?token=s", location, True)
    assert "token=s" not in caught.value.msg and "pw" not in caught.value.msg and "sig=s" not in caught.value.msg
