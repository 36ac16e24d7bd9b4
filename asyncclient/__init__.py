"""asyncclient: asyncio client, CLI and embedded emulator for the Test-Run Service API."""

from asyncclient._version import __version__

__all__ = ["__version__"]
