"""The server's log lines (uvicorn's loggers, configured with `log_config`): start-up and
errors at ``warning``, and the access log (one line per request: client, method, path,
status) at ``info`` when it is on; as plain text, or as one JSON object per line
(``--json-output``, TEI's flag: ``{"timestamp", "level", "target", "message"}``, and for an
access line ``client``, ``method``, ``path``, ``status``)."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

__all__ = ["JsonFormatter", "log_config"]


class JsonFormatter(logging.Formatter):
    """One JSON object per record (UTC ISO timestamp, level, logger name, message; an
    uvicorn access record's fields too)."""

    def format(self, record: logging.LogRecord) -> str:  # noqa: D102
        line = {
            "timestamp": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname,
            "target": record.name,
            "message": record.getMessage(),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple):
            if len(record.args) == 5:  # uvicorn's (client, method, path, http version, status)
                client, method, path, _, status = record.args
                line |= {"client": client, "method": method, "path": path, "status": status}
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(line, default=str)


def log_config(json_output: bool = False, access_log: bool = True) -> dict:
    """The ``log_config`` of ``uvicorn.run``: uvicorn's own lines at warning, the access log
    at info on stdout (``access_log``), text or JSON lines (``json_output``)."""
    if json_output:
        formatter = {"()": "bertfamily.serve.logs.JsonFormatter"}
        access_formatter = formatter
    else:
        formatter = {"format": "%(levelname)s: %(message)s"}
        access_formatter = {"format": "%(asctime)s %(message)s"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter, "access": access_formatter},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stderr",
            },
            "access": {
                "class": "logging.StreamHandler",
                "formatter": "access",
                "stream": "ext://sys.stdout",
            },
        },  # fmt: skip
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "WARNING", "propagate": False},
            "uvicorn.error": {"level": "WARNING"},
            "uvicorn.access": {
                "handlers": ["access"],
                "level": "INFO" if access_log else "WARNING",
                "propagate": False,
            },
        },
    }
