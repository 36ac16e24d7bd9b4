"""The command's logs on stderr: ASYNCCLIENT_LOG (or `log` in a configuration file) and -v
choose the level; without either, only the outage lines (asyncclient.outage) are shown."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Final, TextIO

from asyncclient._core._untrusted import block

__all__ = ["LOG_ENV", "LOG_LEVELS", "asked_level", "log_level", "remove_logging", "setup_logging"]

LOG_ENV: Final = "ASYNCCLIENT_LOG"
LOG_LEVELS: Final = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
_LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"


def log_level(value: object, origin: str) -> int:
    """The level `ASYNCCLIENT_LOG` or the `log` key of a configuration file asks for; a
    ValidationError (exit 2) names the value, where it came from and the levels there are."""
    level = LOG_LEVELS.get(str(value).strip().lower())
    if level is None:
        from asyncclient.errors import ValidationError

        where = f"{LOG_ENV}" if origin == LOG_ENV else f"log in {origin}"
        raise ValidationError(f"{where} is {value!r}, not a log level: give debug, info or warning")
    return level


def setup_logging(
    verbose: bool,
    stream: TextIO | None = None,
    *,
    quiet: bool = False,
    level: int | None = None,
) -> logging.Handler | None:
    """The library's logs on stderr; returns the handler it added. --verbose is `level`
    DEBUG: every request (asyncclient.requests) and retry (asyncclient.retries) as well.
    `level` (ASYNCCLIENT_LOG, or `log` in a file): every asyncclient logger at that level.
    Neither (and not --quiet): only the lines that say the service is away and back
    (asyncclient.outage)."""
    if verbose:
        level = logging.DEBUG
    if level is not None:
        return _attach("asyncclient", _LOG_FORMAT, level, stream)
    if quiet:
        return None
    handler = _attach("asyncclient.outage", "%(message)s", logging.INFO, stream)
    logging.getLogger("asyncclient.outage").propagate = False
    return handler


class _SafeFormatter(logging.Formatter):
    """Log lines through the one sanitiser: a record's message may hold the service's text."""

    def format(self, record: logging.LogRecord) -> str:
        return block(super().format(record))


def _attach(name: str, fmt: str, level: int, stream: TextIO | None) -> logging.Handler:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_SafeFormatter(fmt))
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler


def remove_logging(handler: logging.Handler | None) -> None:
    # main() may run again in-process: no handler piles up.
    outage_logger = logging.getLogger("asyncclient.outage")
    if handler is not None and handler in outage_logger.handlers:
        outage_logger.removeHandler(handler)
        outage_logger.setLevel(logging.NOTSET)
        outage_logger.propagate = True
        return
    if handler is not None:
        logger = logging.getLogger("asyncclient")
        logger.removeHandler(handler)
        if not logger.handlers or all(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.setLevel(logging.NOTSET)


def asked_level(args: argparse.Namespace) -> int | None:
    """The level of ASYNCCLIENT_LOG, else of `log` in a file (put on args by apply_config)."""
    value = os.environ.get(LOG_ENV, "").strip()
    if value:
        return log_level(value, LOG_ENV)
    from asyncclient.cli._options import Globals, read

    setting = read(Globals, args).log_setting
    if setting is None:
        return None
    return log_level(setting.value, setting.origin)
