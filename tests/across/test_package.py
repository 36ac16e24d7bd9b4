"""The package's public surface: every exported name resolves, and importing stays cheap (the
package, and the pytest plugin that every pytest run of an installing project loads)."""

import subprocess
import sys

import pytest

import asyncclient
import asyncclient.testing


@pytest.mark.parametrize("name", asyncclient.__all__)
def test_every_exported_name_resolves(name: str) -> None:
    assert getattr(asyncclient, name) is not None


@pytest.mark.parametrize("name", asyncclient.testing.__all__)
def test_every_name_of_the_testing_package_resolves(name: str) -> None:
    assert getattr(asyncclient.testing, name) is not None


def test_the_watch_and_upload_names_are_exported() -> None:
    from asyncclient.errors import UnknownRunsError
    from asyncclient.upload import UploadItem, UploadResult
    from asyncclient.watch import RunWatcher

    assert asyncclient.UnknownRunsError is UnknownRunsError
    assert asyncclient.RunWatcher is RunWatcher
    assert asyncclient.UploadItem is UploadItem
    assert asyncclient.UploadResult is UploadResult
    assert {"UnknownRunsError", "RunWatcher", "UploadItem", "UploadResult"} <= set(
        asyncclient.__all__
    )


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = asyncclient.Nope  # type: ignore[attr-defined]


def _loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after `statement`."""
    script = f"{statement}\nimport sys\nprint('\\n'.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return set(result.stdout.split())


def test_importing_the_package_loads_no_aiohttp() -> None:
    loaded = _loaded_after("import asyncclient")
    assert "aiohttp" not in loaded
    assert "asyncclient._client._session" not in loaded


def test_importing_the_pytest_plugin_loads_no_emulator() -> None:
    loaded = _loaded_after("import asyncclient.testing.pytest_plugin")
    assert "aiohttp.web" not in loaded
    assert "aiohttp" not in loaded
    assert "asyncclient.testing.server" not in loaded
    assert "asyncclient.testing._app" not in loaded
