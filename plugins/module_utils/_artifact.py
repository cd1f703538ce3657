# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Artifacts a module installs (driver runfiles, firmware images): download, sha256, private copies, URL redaction (private).

Invariant 4: every artifact is verified (sha256) before use, and a mismatch changes nothing. What is verified is
what is used: :func:`private_copy` hashes the bytes it copies into a folder only this user can enter, and the
caller executes or flashes that copy, never the file at the operator's path (a job user may swap it after the check).
Invariant 7: a URL's credentials never reach output or logs. :func:`secret_in_url` says why a URL
must not be a plain (logged) option; :func:`redact_url` is what messages show of any URL. A download follows
redirects only to https:// URLs, and its credentials only to the origin they were given for (:func:`redirect_target`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
from urllib.parse import parse_qsl, urljoin, urlsplit, urlunsplit

from ansible.module_utils.urls import fetch_url
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._errors import GpufleetError

CHUNK = 1 << 20
# Query parameters that carry a signature, a credential or a token: S3 / GCS presigned URLs, CloudFront,
# Azure SAS (sig, and se/sp beside it), and generic tokens. Compared case-insensitively.
SECRET_QUERY_NAMES = frozenset(
    (
        "x-amz-signature", "x-amz-credential", "x-amz-security-token",
        "x-goog-signature", "x-goog-credential",
        "signature", "sig", "key-pair-id", "policy",
        "token", "access_token", "auth", "api_key", "apikey", "password", "secret",
    )
)
_SECRET_QUERY_PART = re.compile(r"signature|credential|token|secret|passw", re.IGNORECASE)
# A URL in free text: a scheme ([A-Za-z][A-Za-z0-9+.-]*), "://", then anything but space, quotes and angle brackets.
# Found by sub_urls in linear time: the regex with the scheme in front backtracked over every long run of letters
# (a hex dump in a message: 16x the time for 4x the text).
_SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_URL_REST = re.compile(r"[^\s'\"<>]+")
_URL_SCHEME = re.compile(r"(?:https?|ftp)://.*", re.IGNORECASE | re.DOTALL)
_SHA256 = re.compile(r"(?:sha256:)?([0-9a-fA-F]{64})")
# The answers that name another URL in Location; at most MAX_REDIRECTS of them are followed (urllib's own limit).
REDIRECT_STATUSES = frozenset((301, 302, 303, 307, 308))
MAX_REDIRECTS = 10
_DEFAULT_PORTS = {"https": 443, "http": 80, "ftp": 21}


class ArtifactError(GpufleetError):
    """An artifact could not be downloaded or is not the one the checksum names; nothing was changed."""


def is_url(source):
    """True for an ``http(s)://`` or ``ftp://`` URL (anything else is a path on the node)."""
    return isinstance(source, str) and _URL_SCHEME.fullmatch(source) is not None


def is_https(url):
    """True for an ``https://`` URL with a host: the only scheme a download is sent to or redirected to."""
    try:
        parts = urlsplit(url)
    except (TypeError, ValueError):
        return False
    return parts.scheme.lower() == "https" and bool(parts.hostname)


def origin(url):
    """``(scheme, host, port)`` of ``url``, lower-case, the port filled in from the scheme: what credentials are bound to."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1  # a port that does not parse matches no other origin
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


def redirect_target(current, location, credentials):
    """Where a redirect from ``current`` goes, and whether the credentials go with it: ``(url, credentials)``.

    ``location`` is the answer's Location header (relative or absolute). Only an https:// target is followed
    (ArtifactError otherwise: the file and any credentials would travel in clear, and a downgrade is what an
    attacker in the middle would ask for). ``credentials`` stay True only when the target has the same scheme,
    host and port as ``current``: a repository that redirects to a CDN or an object store never receives the
    Authorization header, the url_headers or the basic-auth password meant for the repository.
    """
    if not isinstance(location, str) or not location.strip():
        raise ArtifactError(f"{redact_url(current)} answered with a redirect that names no URL (no Location header). Nothing was changed")
    try:
        target = urljoin(current, location.strip())
    except ValueError as exc:
        raise ArtifactError(f"{redact_url(current)} redirected to a Location that is not a URL. Nothing was changed") from exc
    if not is_https(target):
        raise ArtifactError(
            f"{redact_url(current)} redirected to {redact_url(target)}: a download follows redirects only to https:// URLs "
            "(the file and its credentials would travel in clear). Nothing was changed. Serve the file over https, "
            "or give the final https:// URL"
        )
    return target, bool(credentials) and origin(target) == origin(current)


def redact_url(url):
    """``url`` without ``user:password@``, query string and fragment (presigned URLs carry their signature there).

    Text that is not a URL (a local path) is returned unchanged.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<url not shown>"
    if not parts.scheme or not parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def sub_urls(text, replace):
    """``text`` with each URL in it replaced by ``replace(url)``, in time linear in the text.

    The same URLs as ``re.sub(r"[A-Za-z][A-Za-z0-9+.-]*://[^\\s'\"<>]+", ...)`` finds, left to right and without
    overlap: each "://" is found once, its scheme by walking back over scheme characters (never past the previous
    URL or "://"), the scheme starting at the first letter of that run.
    """
    out, done, pos = [], 0, 0
    while True:
        colon = text.find("://", pos)
        if colon < 0:
            break
        start = colon
        while start > done and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < colon and text[start] not in _LETTERS:
            start += 1
        rest = _URL_REST.match(text, colon + 3)
        if start == colon or rest is None:
            pos = colon + 1
            continue
        out.append(text[done:start])
        out.append(replace(text[start:rest.end()]))
        done = pos = rest.end()
    out.append(text[done:])
    return "".join(out)


def redact_urls_in(text):
    """``text`` with every URL in it passed through :func:`redact_url` (messages of the HTTP client)."""
    return sub_urls(str(text or ""), redact_url)


def secret_in_url(url):
    """Why ``url`` carries a secret (``"a user name or password (user:password@)"``...), or None.

    The reason names the part, never its value: it goes into a message.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "a part that does not parse as a URL"
    if not parts.scheme or not parts.netloc:
        return None
    if "@" in parts.netloc:
        return "a user name or password (user:password@ before the host)"
    for text in (parts.query, parts.fragment):
        for name, _value in parse_qsl(text, keep_blank_values=True):
            if name.lower() in SECRET_QUERY_NAMES or _SECRET_QUERY_PART.search(name):
                return f"a signature, credential or token in its query (parameter {name})"
    return None


def parse_checksum(checksum, what="checksum"):
    """``sha256:<hex>`` or bare hex (surrounding blanks allowed) -> lower-case hex; ArtifactError otherwise."""
    match = _SHA256.fullmatch(checksum.strip()) if isinstance(checksum, str) else None
    if not match:
        shown = checksum if isinstance(checksum, str) and len(checksum) <= 100 else type(checksum).__name__
        raise ArtifactError(
            f"{what} {shown!r} is not a sha256: give sha256:<64 hex digits> or the 64 hex digits "
            "(the vendor publishes them beside each file; or run sha256sum on the file you trust)"
        )
    return match.group(1).lower()


def sha256_file(path):
    """The sha256 of the file at ``path``, as lower-case hex (read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path, checksum, shown=None):
    """The sha256 of ``path`` when it equals ``checksum``; ArtifactError (with ``sha256``) otherwise.

    ``shown`` names the file in the message (a redacted URL); the path by default.
    """
    expected = parse_checksum(checksum)
    shown = redact_url(shown or path)
    if not os.path.isfile(path):
        raise ArtifactError(f"{shown} does not exist on the node (or is not a file): copy it there first or give an https:// URL", path=path)
    try:
        actual = sha256_file(path)
    except OSError as exc:
        raise ArtifactError(f"cannot read {shown}: {exc.strerror or exc}", path=path) from exc
    if actual != expected:
        raise ArtifactError(
            f"checksum mismatch for {shown}: sha256 is {actual}, expected {expected}. Nothing was changed. "
            "The file is damaged or not the one you meant: download it again from the vendor, or correct the checksum",
            sha256=actual,
        )
    return actual


def private_folder(parent):
    """A new folder under ``parent`` (the module's tmpdir) that only this user can enter (0700)."""
    try:
        return tempfile.mkdtemp(prefix="gpufleet-artifact.", dir=parent)
    except OSError as exc:
        raise ArtifactError(f"cannot create a private folder in {parent}: {exc.strerror or exc}. Nothing was changed") from exc


def private_copy(path, checksum, folder, shown=None):
    """Copy the file at ``path`` into a new private folder under ``folder``, hashing the bytes as they are copied.

    Returns ``(copy, sha256)`` when the sha256 equals ``checksum``; ArtifactError otherwise, and nothing is left
    behind. Execute or flash ``copy``, never ``path``: a file in a folder a job user can write (NFS scratch, a home
    directory) can be swapped between a check and its use; the copy sits in a 0700 folder of this user, created
    with O_EXCL and O_NOFOLLOW, and its bytes are the ones hashed. ``folder`` is the module's tmpdir (Ansible
    removes it when the module ends); ``shown`` names the file in messages (the path by default).
    """
    expected = parse_checksum(checksum)
    shown = redact_url(shown or path)
    missing = f"{shown} does not exist on the node (or is not a file): copy it there first"
    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang the module; it is refused below as not a file.
        source = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise ArtifactError(missing, path=path) from exc
    except OSError as exc:
        raise ArtifactError(f"cannot read {shown}: {exc.strerror or exc}", path=path) from exc
    target = None
    try:
        if not stat.S_ISREG(os.fstat(source).st_mode):
            raise ArtifactError(missing, path=path)
        target = private_folder(folder)
        copy = os.path.join(target, os.path.basename(path.rstrip("/")) or "artifact")
        digest = hashlib.sha256()
        try:
            out = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(out, "wb") as handle:
                for chunk in iter(lambda: os.read(source, CHUNK), b""):
                    digest.update(chunk)
                    handle.write(chunk)
        except OSError as exc:
            raise ArtifactError(f"cannot copy {shown} into {folder}: {exc.strerror or exc}. Nothing was changed", path=path) from exc
        actual = digest.hexdigest()
        if actual != expected:
            raise ArtifactError(
                f"checksum mismatch for {shown}: sha256 is {actual}, expected {expected}. Nothing was changed. "
                "The file is damaged or not the one you meant: download it again from the vendor, or correct the checksum",
                sha256=actual,
            )
    except ArtifactError:
        if target:
            shutil.rmtree(target, ignore_errors=True)
        raise
    finally:
        os.close(source)
    return copy, actual


class _RaisingModule:
    """The module as fetch_url sees it for one request: the credentials of that request (or none), redirects not
    followed (:func:`fetch` decides each one), and a ``fail_json`` that raises an ArtifactError with the URL
    redacted instead of ending the module with the URL in its result."""

    def __init__(self, module, url, url_username, url_password):
        self._module = module
        self._url = url
        self.params = {
            "url_username": url_username or "",
            "url_password": url_password or "",
            "force_basic_auth": bool(url_username),
            "validate_certs": True,
            "follow_redirects": "none",
        }

    def __getattr__(self, name):
        return getattr(self._module, name)

    def fail_json(self, msg, **_kwargs):
        raise ArtifactError(f"cannot download {redact_url(self._url)}: {redact_urls_in(msg)}. Nothing was changed")


def _open(module, url, headers, url_username, url_password, timeout):
    """The answer to a GET of ``url`` that is no redirect: ``(response, info, final_url, redirects)``.

    Every hop is asked separately: the credentials go with a hop only while it has the origin they were given for
    (:func:`redirect_target`), and a hop that is not https:// is refused before anything is sent to it.
    """
    credentials = bool(headers or url_username or url_password)
    first, redirects = url, []
    while True:
        if not is_https(url):
            raise ArtifactError(f"{redact_url(url)} is not an https:// URL: a download is made only over https. Nothing was changed")
        view = _RaisingModule(module, url, url_username if credentials else None, url_password if credentials else None)
        response, info = fetch_url(view, url, headers=(headers if credentials else None) or None, timeout=timeout)
        if info.get("status") not in REDIRECT_STATUSES:
            return response, info, url, redirects
        if len(redirects) >= MAX_REDIRECTS:
            raise ArtifactError(f"cannot download {redact_url(first)}: more than {MAX_REDIRECTS} redirects (a loop?). Nothing was changed")
        url, credentials = redirect_target(url, info.get("location"), credentials)
        redirects.append(url)


def fetch(module, url, dest, checksum, headers=None, url_username=None, url_password=None, timeout=60):
    """Download ``url`` to ``dest`` and verify its sha256.

    Returns ``{"path": dest, "sha256", "url": the final URL, redirects: how many}``, the URL redacted
    (:func:`redact_url`: no user, password, query or fragment). Only https:// is asked, redirects included;
    ``headers`` (a token), ``url_username`` and ``url_password`` (HTTP basic authentication) come from no_log options
    and are sent to ``url``'s origin only, never to another host, port or scheme a redirect names. The body goes to
    a temporary file beside ``dest`` first (give a ``dest`` in a :func:`private_folder`): ``dest`` appears only once
    the checksum matched, and a mismatch leaves nothing behind. ArtifactError on any failure.
    """
    shown = redact_url(url)
    hint = "Check the URL and its credentials, or give a path on the node"
    response, info, final, redirects = _open(module, url, headers, url_username, url_password, timeout)
    where = f" (redirected to {redact_url(final)})" if redirects else ""
    if response is None or info.get("status") != 200:
        raise ArtifactError(
            f"cannot download {shown}{where}: HTTP {info.get('status')} {redact_urls_in(info.get('msg'))}. Nothing was changed. {hint}"
        )
    folder = os.path.dirname(os.path.abspath(dest))
    try:
        fd, part = tempfile.mkstemp(prefix=".gpufleet-download.", dir=folder)
    except OSError as exc:
        raise ArtifactError(f"cannot download {shown} into {folder}: {exc.strerror or exc}. Nothing was changed") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in iter(lambda: response.read(CHUNK), b""):
                handle.write(chunk)
        actual = verify(part, checksum, shown=url)
        os.replace(part, dest)
    except ArtifactError:
        os.unlink(part)
        raise
    except (OSError, ValueError) as exc:  # a connection reset or timeout mid-body, a full disk
        os.unlink(part)
        raise ArtifactError(f"cannot download {shown}{where}: {redact_urls_in(exc)}. Nothing was changed. {hint}") from exc
    return {"path": dest, "sha256": actual, "url": redact_url(final), "redirects": len(redirects)}


__all__ = [
    "ArtifactError", "fetch", "is_https", "is_url", "origin", "parse_checksum", "private_copy", "private_folder", "redact_url",
    "redact_urls_in", "redirect_target", "secret_in_url", "sha256_file", "verify",
]
