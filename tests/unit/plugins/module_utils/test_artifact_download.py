"""_artifact.fetch against real local HTTP(S) servers that record the headers they receive: credentials never follow a
redirect to another origin, nothing follows a redirect to http://, the final URL is reported without its secrets."""

from __future__ import annotations

import base64
import hashlib
import http.server
import ssl
import threading

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._artifact import ArtifactError, fetch

from tests.gpusim.bmc.cert import make_self_signed

BODY = b"#!/bin/sh\necho simulated runfile\n" * 100
CHECKSUM = hashlib.sha256(BODY).hexdigest()
TOKEN = "Bearer tok-hunter2"  # noqa: S105 - made up
PASSWORD = "pw-hunter2"  # noqa: S105 - made up
BASIC = "Basic " + base64.b64encode(f"fleet:{PASSWORD}".encode()).decode()


class Server:
    """A server on 127.0.0.1 (https with the test CA, or plain http): ``routes`` maps a path to (status, headers, body);
    ``seen`` records (path, headers) of every request, as received."""

    def __init__(self, tls=None):
        self.routes = {}
        self.seen = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # http.server calls it by this name
                owner.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                status, headers, body = owner.routes.get(self.path.split("?")[0], (404, {}, b"not here"))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value.format(https=owner.https_port, http=owner.http_port))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.https_port = self.http_port = None
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    def headers_at(self, path):
        return [headers for seen, headers in self.seen if seen.split("?")[0] == path]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    make_self_signed(folder / "cert.pem", folder / "key.pem", ["127.0.0.1"], ["localhost"], "gpufleet test")
    return str(folder / "cert.pem"), str(folder / "key.pem")


@pytest.fixture
def servers(cert, monkeypatch):
    """Two https servers (two origins: other ports) and one http server, each knowing the others' ports."""
    monkeypatch.setenv("SSL_CERT_FILE", cert[0])
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "*")
    one, two, plain = Server(cert), Server(cert), Server()
    for server in (one, two, plain):
        server.https_port, server.http_port = two.port, plain.port
    yield one, two, plain
    for server in (one, two, plain):
        server.close()


class _Module:
    def __init__(self, tmp_path):
        self.params = {}
        self.tmpdir = str(tmp_path)


def _get(tmp_path, url, **credentials):
    return fetch(_Module(tmp_path), url, str(tmp_path / "NVIDIA.run"), CHECKSUM, timeout=10, **credentials)


CREDENTIALS = {"headers": {"Authorization": TOKEN, "X-Api-Key": "key-hunter2"}}
BASIC_AUTH = {"url_username": "fleet", "url_password": PASSWORD}


def _has_credentials(headers):
    return "authorization" in headers or "x-api-key" in headers


@pytest.mark.parametrize("credentials", [CREDENTIALS, BASIC_AUTH], ids=["url_headers", "basic-auth"])
def test_credentials_reach_the_origin_and_survive_a_redirect_within_it(servers, tmp_path, credentials):
    one, _two, _plain = servers
    one.routes["/a"] = (302, {"Location": "/nvidia/NVIDIA.run"}, b"")
    one.routes["/nvidia/NVIDIA.run"] = (200, {}, BODY)
    got = _get(tmp_path, f"https://127.0.0.1:{one.port}/a", **credentials)
    assert got == {"path": str(tmp_path / "NVIDIA.run"), "sha256": CHECKSUM, "url": f"https://127.0.0.1:{one.port}/nvidia/NVIDIA.run", "redirects": 1}
    assert (tmp_path / "NVIDIA.run").read_bytes() == BODY
    expected = TOKEN if credentials is CREDENTIALS else BASIC
    assert [h.get("authorization") for h in one.headers_at("/a") + one.headers_at("/nvidia/NVIDIA.run")] == [expected, expected]


@pytest.mark.parametrize("credentials", [CREDENTIALS, BASIC_AUTH], ids=["url_headers", "basic-auth"])
@pytest.mark.parametrize(
    ("location", "where"),
    [
        ("https://127.0.0.1:{https}/cdn/NVIDIA.run?X-Amz-Signature=sig-hunter2&X-Amz-Credential=AKIA", "other-port"),
        ("https://localhost:{https}/cdn/NVIDIA.run?X-Amz-Signature=sig-hunter2", "other-host"),
    ],
)
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_drops_every_credential(servers, tmp_path, credentials, location, where, status):
    one, two, _plain = servers
    one.routes["/a"] = (status, {"Location": location}, b"")
    two.routes["/cdn/NVIDIA.run"] = (200, {}, BODY)
    got = _get(tmp_path, f"https://127.0.0.1:{one.port}/a", **credentials)
    assert _has_credentials(one.headers_at("/a")[0])
    received = two.headers_at("/cdn/NVIDIA.run")
    assert len(received) == 1 and not _has_credentials(received[0]), received
    host = "127.0.0.1" if where == "other-port" else "localhost"
    # The final URL as reported: no query (the object store's signature), no user or password.
    assert got["url"] == f"https://{host}:{two.port}/cdn/NVIDIA.run" and got["redirects"] == 1


def test_credentials_dropped_once_are_not_sent_back_to_the_origin(servers, tmp_path):
    """A -> B -> A: the origin that B names again is not trusted to be the one the credentials were given for."""
    one, two, _plain = servers
    one.routes["/a"] = (302, {"Location": "https://127.0.0.1:{https}/b"}, b"")
    two.routes["/b"] = (302, {"Location": f"https://127.0.0.1:{one.port}/c"}, b"")
    one.routes["/c"] = (200, {}, BODY)
    _get(tmp_path, f"https://127.0.0.1:{one.port}/a", **CREDENTIALS)
    assert [_has_credentials(h) for h in one.headers_at("/a") + two.headers_at("/b") + one.headers_at("/c")] == [True, False, False]


@pytest.mark.parametrize("credentials", [CREDENTIALS, BASIC_AUTH, {}], ids=["url_headers", "basic-auth", "none"])
def test_a_redirect_to_plain_http_is_refused_before_anything_is_sent_there(servers, tmp_path, credentials):
    one, _two, plain = servers
    one.routes["/a"] = (302, {"Location": "http://fleet:pw-hunter2@127.0.0.1:{http}/NVIDIA.run?sig=sig-hunter2"}, b"")
    plain.routes["/NVIDIA.run"] = (200, {}, BODY)
    with pytest.raises(ArtifactError) as caught:
        _get(tmp_path, f"https://127.0.0.1:{one.port}/a", **credentials)
    assert caught.value.msg.startswith(
        f"https://127.0.0.1:{one.port}/a redirected to http://127.0.0.1:{plain.port}/NVIDIA.run: a download follows redirects only to https://"
    )
    assert "hunter2" not in caught.value.msg
    assert plain.seen == []
    assert list(tmp_path.iterdir()) == []


def test_a_url_that_is_not_https_is_never_asked(servers, tmp_path):
    _one, _two, plain = servers
    plain.routes["/NVIDIA.run"] = (200, {}, BODY)
    with pytest.raises(ArtifactError, match=r"^http://127\.0\.0\.1:\d+/NVIDIA\.run is not an https:// URL"):
        _get(tmp_path, f"http://127.0.0.1:{plain.port}/NVIDIA.run?token=hunter2", **CREDENTIALS)
    assert plain.seen == []


def test_a_redirect_loop_ends_with_an_error(servers, tmp_path):
    one, _two, _plain = servers
    one.routes["/a"] = (302, {"Location": "/a"}, b"")
    with pytest.raises(ArtifactError, match=r"more than 10 redirects \(a loop\?\)\. Nothing was changed"):
        _get(tmp_path, f"https://127.0.0.1:{one.port}/a?sig=hunter2")
    assert len(one.seen) == 11


def test_an_http_error_after_a_redirect_names_both_urls_without_secrets(servers, tmp_path):
    one, two, _plain = servers
    one.routes["/a"] = (302, {"Location": "https://127.0.0.1:{https}/gone?X-Amz-Signature=sig-hunter2"}, b"")
    with pytest.raises(ArtifactError) as caught:
        _get(tmp_path, f"https://127.0.0.1:{one.port}/a?token=hunter2", **CREDENTIALS)
    assert caught.value.msg.startswith(
        f"cannot download https://127.0.0.1:{one.port}/a (redirected to https://127.0.0.1:{two.port}/gone): HTTP 404"
    )
    assert "hunter2" not in caught.value.msg


def test_an_untrusted_certificate_is_refused(servers, tmp_path, monkeypatch):
    one, _two, _plain = servers
    one.routes["/NVIDIA.run"] = (200, {}, BODY)
    monkeypatch.delenv("SSL_CERT_FILE")
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))  # no CA the test server's certificate chains to
    with pytest.raises(ArtifactError, match=r"^cannot download https://127\.0\.0\.1:\d+/NVIDIA\.run: .*certificate"):
        _get(tmp_path, f"https://127.0.0.1:{one.port}/NVIDIA.run")
