"""The emulator's TLS: a throwaway CA and a certificate for loopback (trustme), or a pair the
user brings; optionally a demand for client certificates, for testing mutual TLS."""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from pathlib import Path

import attrs

__all__ = ["LOOPBACK_NAMES", "TlsFiles"]

#: Every name a local client uses for loopback.
LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")


def _file(value: str | os.PathLike[str] | None, what: str) -> Path | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise ValueError(f"{what} {path} does not exist: give the path of a PEM file")
    return path


@attrs.define
class TlsFiles:
    """Where the service's TLS material lives. The throwaway CA's files go to a folder of their
    own, made at start and removed at stop."""

    cert: Path | None
    key: Path | None
    ca: Path | None
    require_client_cert: bool
    client_ca: Path | None
    folder: Path | None = None
    ca_file: Path | None = None
    client_cert_file: Path | None = None

    @classmethod
    def check(
        cls,
        *,
        tls: bool,
        cert: str | os.PathLike[str] | None,
        key: str | os.PathLike[str] | None,
        ca: str | os.PathLike[str] | None,
        require_client_cert: bool,
        client_ca: str | os.PathLike[str] | None,
    ) -> TlsFiles | None:
        """The TLS settings, checked before any port is taken; None for plain HTTP."""
        own = cert is not None or key is not None
        if not (tls or own or ca is not None or require_client_cert or client_ca is not None):
            return None
        if key is not None and cert is None:
            raise ValueError("tls_key was given without tls_cert: give both (or neither)")
        if ca is not None and not own:
            raise ValueError("tls_ca names the CA of a certificate you bring: give tls_cert too")
        if client_ca is not None and not own:
            raise ValueError(
                "client_ca goes with a certificate you bring (tls_cert); with the throwaway CA, "
                "require_client_cert=True accepts the certificates it issues"
            )
        return cls(
            cert=_file(cert, "tls_cert"),
            key=_file(key, "tls_key"),
            ca=_file(ca, "tls_ca"),
            require_client_cert=require_client_cert or client_ca is not None,
            client_ca=_file(client_ca, "client_ca"),
        )

    def server_context(self) -> ssl.SSLContext:
        """The server's context; makes the throwaway CA and its files when no pair was given.
        Blocking (key generation, files): call it in a thread."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        if self.cert is not None:
            try:
                context.load_cert_chain(str(self.cert), str(self.key) if self.key else None)
            except ssl.SSLError as exc:
                raise ValueError(
                    f"tls_cert {self.cert} cannot be served ({exc.reason or exc}): give a PEM "
                    "certificate and its unencrypted key (in it, or as tls_key)"
                ) from None
            self.ca_file = self.ca
            if self.client_ca is not None:
                context.verify_mode = ssl.CERT_REQUIRED
                try:
                    context.load_verify_locations(cafile=str(self.client_ca))
                except ssl.SSLError as exc:
                    raise ValueError(
                        f"client_ca {self.client_ca} holds no CA certificate in PEM form "
                        f"({exc.reason or exc})"
                    ) from None
            return context
        from asyncclient._core._extras import require

        require("the emulator's TLS (serve --tls, FakeService(tls=True))", "tls", "trustme")
        import trustme  # only the throwaway CA needs it

        self.folder = Path(tempfile.mkdtemp(prefix="asyncclient-tls-"))
        authority = trustme.CA(organization_name="asyncclient emulator (throwaway CA)")
        authority.issue_cert(*LOOPBACK_NAMES).configure_cert(context)
        self.ca_file = self.folder / "ca.pem"
        authority.cert_pem.write_to_path(str(self.ca_file))
        if self.require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            authority.configure_trust(context)
            client = authority.issue_cert("asyncclient-test-client")
            self.client_cert_file = self.folder / "client.pem"
            with self.client_cert_file.open("wb") as out:
                out.write(client.private_key_pem.bytes())
                for blob in client.cert_chain_pems:
                    out.write(blob.bytes())
        return context

    def cleanup(self) -> None:
        folder, self.folder = self.folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
