"""The package version (read by hatch for the wheel, and sent in the User-Agent)."""

__version__ = "0.1.0"
