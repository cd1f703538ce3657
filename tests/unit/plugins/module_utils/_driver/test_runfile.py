"""_driver_runfile.redact_url / redact_urls_in: no credentials or query strings in messages."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._driver.runfile import redact_url, redact_urls_in


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
