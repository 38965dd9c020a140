"""Every registered call format, checked from the registry (`toolserver.formats.FORMATS`): a format added there
is covered here without editing this file. Malformed inputs never raise and give documented results."""

import importlib
import pkgutil
from pathlib import Path

import pytest

import toolserver.formats
from toolserver.formats import FORMATS, CallFormat, Parsed, TurnRule, get_format, parse

NASTY_TEXTS = ["", "<tool_call>", "</tool_call><tool_call>", "<tool>\n</tool>", "```json\n\n```", "<zoom></zoom>",
               "<grounding></grounding>", "\x00\uffff" * 100, "{" * 10000, '<tool_call>{"name": 1}</tool_call>',
               "<tool>name: zoom\nkeypoint: 1e999</tool>", "<tool_call>\n" + "[" * 5000 + "\n</tool_call>",
               '```json\n[{"bbox_2d": "' + "9" * 5000 + '"}]\n```', "<zoom>" + "[" * 5000 + "</zoom>",
               "<answer>1</answer><tool_call>{}</tool_call>", "<think><tool_call>", "\ud800", "<tool>\n:\n</tool>"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("text", ["", "<tool_call>", "</tool_call><tool_call>", "<tool>\n</tool>", "```json\n\n```",
                                  "<zoom></zoom>", "<grounding></grounding>", "\x00\uffff" * 100, "{" * 10000,
                                  '<tool_call>{"name": 1}</tool_call>', "<tool>name: zoom\nkeypoint: 1e999</tool>"])
def test_never_raises(fmt, text):
    parsed = parse(text, fmt)
    assert parsed.format == fmt


@pytest.mark.parametrize("name", FORMATS)
def test_every_format_is_complete(name):
    fmt = FORMATS[name]
    assert isinstance(fmt, CallFormat)
    assert isinstance(fmt.name, str) and fmt.name == name
    assert isinstance(fmt.description, str) and fmt.description.strip()
    assert isinstance(fmt.turn, TurnRule)
    assert get_format(name) is fmt


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("text", NASTY_TEXTS)
def test_read_never_raises_and_its_parser_needs_no_safety_net(name, text):
    parsed = FORMATS[name].read(text)
    assert isinstance(parsed, Parsed) and parsed.format == name
    assert all(isinstance(error, str) for error in parsed.errors)
    # `read` turns a parser's exception into this text; a format's own `parse` should never need it.
    assert not any(error.startswith("Error: could not read the tool call") for error in parsed.errors)


def test_every_format_module_registers_its_format():
    """A `CallFormat` defined in a module of toolserver/formats/ but left out of the registry fails here."""
    defined = set()
    for info in pkgutil.iter_modules(toolserver.formats.__path__):
        module = importlib.import_module(f"toolserver.formats.{info.name}")
        defined |= {value.name for value in vars(module).values() if isinstance(value, CallFormat)}
    assert defined <= set(FORMATS)
    assert {FORMATS[name].__class__.__module__ for name in FORMATS} >= {
        f"toolserver.formats.{info.name}" for info in pkgutil.iter_modules(toolserver.formats.__path__)
        if info.name != "base"}


def test_every_format_module_has_its_test_file():
    tests = Path(__file__).parent
    for module in pkgutil.iter_modules(toolserver.formats.__path__):
        if module.name != "base":
            assert (tests / f"test_{module.name}.py").exists(), f"tests/formats/test_{module.name}.py is missing"
