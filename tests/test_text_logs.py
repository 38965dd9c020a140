"""Text logs (`TOOLSERVER_LOG_FORMAT=text`) carry what the JSON lines carry: an access line's method, path, status
and duration, and any record's extra fields."""

from __future__ import annotations

import io
import logging
import re

from toolserver.logs import RequestIdFilter, TextFormatter, logging_config

ACCESS = re.compile(r"^\S+ \S+ INFO +toolserver\.access \[(?P<rid>[^\]]+)\] (?P<method>[A-Z]+) (?P<path>\S+) "
                    r"(?P<status>\d{3}) (?P<ms>\d+(\.\d+)?) ms client=(?P<client>\S+)$")


def test_the_text_format_is_the_text_formatter():
    config = logging_config("text")
    assert config["formatters"]["text"]["()"] is TextFormatter


def test_access_lines_carry_method_path_status_and_duration(client):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    handler.addFilter(RequestIdFilter())
    access = logging.getLogger("toolserver.access")
    level = access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        client.get("/v1/profiles", headers={"X-Request-ID": "text-ok"})
        client.get("/v1/sessions/nope", headers={"X-Request-ID": "text-404"})
        client.put("/v1/sessions", headers={"X-Request-ID": "text-405"})
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    lines = {m["rid"]: m for m in map(ACCESS.match, stream.getvalue().splitlines()) if m}
    assert set(lines) == {"text-ok", "text-404", "text-405"}, stream.getvalue()
    assert [lines[r]["method"] for r in ("text-ok", "text-404", "text-405")] == ["GET", "GET", "PUT"]
    assert [lines[r]["path"] for r in ("text-ok", "text-404", "text-405")] == ["/v1/profiles", "/v1/sessions/nope",
                                                                             "/v1/sessions"]
    assert [lines[r]["status"] for r in ("text-ok", "text-404", "text-405")] == ["200", "404", "405"]
    assert all(float(line["ms"]) > 0 for line in lines.values())


def test_other_records_keep_their_extra_fields():
    record = logging.LogRecord("toolserver", logging.WARNING, __file__, 1, "lowered to %d", (2,), None)
    record.request_id, record.workers = None, 2
    assert TextFormatter().format(record).endswith("WARNING toolserver [None] lowered to 2 workers=2")
