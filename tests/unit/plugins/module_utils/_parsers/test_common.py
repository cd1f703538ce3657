"""Tests of the parsers' shared whole-version rule."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._parsers._common import ParseError, cut_line, cut_short, driver_version, whole_lines


@pytest.mark.parametrize("value", ["550.90.07", "535.161.08", "418.226.00"])
def test_three_parts_are_whole_anywhere(value):
    assert driver_version(value, "tool", "field") == value
    assert driver_version(value, "tool", "field", three_parts=True) == value


@pytest.mark.parametrize("value", ["595.80", "418.43", "572.61", "550.120", "390.157"])
def test_two_parts_are_whole_only_when_the_tool_printed_what_follows(value):
    assert driver_version(value, "tool", "field", terminated=True) == value
    with pytest.raises(ParseError, match=rf"tool: field '{value}' has no patch part"):
        driver_version(value, "tool", "field")
    with pytest.raises(ParseError, match="has no patch part"):
        driver_version(value, "tool", "field", terminated=True, three_parts=True)


@pytest.mark.parametrize("value", ["384.9", "515.4", "535.161.0", "535.16.", "550.90.07\n", " 550.90.07", "5.90.07", "", None, 550.9])
def test_not_whole(value):
    with pytest.raises(ParseError, match="tool: field"):
        driver_version(value, "tool", "field", terminated=True)


@pytest.mark.parametrize(
    ("text", "cut", "whole"),
    [
        ("a\nXid 7", "Xid 7", "a\n"),
        ("a\nb\n", None, "a\nb\n"),
        ("a\r\nb\r", None, "a\r\nb\r"),
        ("a\rb", "b", "a\r"),
        ("only", "only", ""),
        ("a\n  ", "  ", "a\n"),
        ("", None, ""),
        (None, None, ""),
    ],
)
def test_cut_line_and_whole_lines(text, cut, whole):
    assert cut_line(text) == cut
    assert whole_lines(text) == whole


def test_cut_short_names_tool_field_and_line():
    error = cut_short("squeue", "the last job", "123,ali")
    assert isinstance(error, ParseError)
    assert str(error) == "squeue: the output was cut short in the last job (its last line '123,ali' has no newline): read it again whole"
