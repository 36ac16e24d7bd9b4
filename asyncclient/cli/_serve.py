"""`asyncclient serve`: run the embedded Test-Run Service emulator until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from typing import Any, Final

import attrs

from asyncclient._core._suggest import did_you_mean
from asyncclient.cli._common import EXIT_OK, CommandError, add_command
from asyncclient.cli._options import Globals, read
from asyncclient.cli._output import Output, format_time

_EXAMPLES = """\
  asyncclient serve                              # demo seed on http://127.0.0.1:8080
  asyncclient serve --port 0 --speed 60          # a free port; a service minute per second
  asyncclient serve --seed my-project.toml
  asyncclient serve --tls                        # HTTPS; prints the CA file to trust
  asyncclient serve --tls --require-client-cert  # mutual TLS; prints a client certificate
  asyncclient serve --tls-cert server.pem --tls-key server.key --tls-ca ca.pem
  asyncclient serve --latency-ms 50 --part-bandwidth 100000000 \\
      --error-rate 0.1 --fault-ops upload_part
"""


@attrs.frozen(kw_only=True)
class ServeOptions:
    """`serve`'s options, read once from its parsed line; the parser's defaults are these."""

    host: str = "127.0.0.1"
    port: int = 8080
    seed: str | None = None
    speed: float = 10.0
    dialect: str | None = None
    part_bytes: int | None = None
    max_bytes: int | None = None
    tls: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    require_client_cert: bool = False
    client_ca: str | None = None
    latency_ms: float = 0.0
    part_bandwidth: float | None = None
    link_bandwidth: float | None = None
    error_rate: float = 0.0
    rate_limit_rate: float = 0.0
    drop_rate: float = 0.0
    retry_after: float = 1.0
    fault_ops: str | None = None
    rate_limit_per_key: float | None = None
    fault_seed: int = 0


_DEFAULT: Final = ServeOptions()


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub,
        "serve",
        parents,
        handler="asyncclient.cli._serve:serve",
        help="run the embedded emulator of the service",
        description="Run the embedded Test-Run Service emulator on loopback until Ctrl-C. "
        "It prints the base URL, the projects and the keys.",
        examples=_EXAMPLES,
        uses_service=False,
    )
    # Ctrl-C or SIGTERM is the way to stop: exit 0.
    p.set_defaults(ends_on_signal=True)
    p.add_argument(
        "--host", default=_DEFAULT.host, help="address to listen on (default %(default)s)"
    )
    p.add_argument(
        "--port",
        type=int,
        default=_DEFAULT.port,
        help="port (default %(default)s; 0 picks a free one)",
    )
    p.add_argument("--seed", metavar="FILE", help="a JSON or TOML seed file (default: demo seed)")
    p.add_argument(
        "--speed",
        type=float,
        default=_DEFAULT.speed,
        help="service seconds per wall second (default %(default)g: a 60 s run takes 6 s); service "
        "time starts at the wall clock's now and runs this many times faster",
    )
    p.add_argument(
        "--dialect",
        metavar="NAME",
        help="how the service fills what the API spec leaves open: asyncclient (default), "
        "flat, enveloped, or package.module:ClassName (see the README)",
    )
    p.add_argument("--part-bytes", type=int, help="upload part size in bytes (default 8 MiB)")
    p.add_argument("--max-bytes", type=int, help="largest build in bytes (default 4 GiB)")
    tls = p.add_argument_group("TLS (plain HTTP by default)")
    tls.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS with a certificate for 127.0.0.1, ::1 and localhost from a throwaway "
        "CA made at start; its CA file is printed (give it to clients with --ca-file)",
    )
    tls.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this PEM certificate")
    tls.add_argument("--tls-key", metavar="FILE", help="the key of --tls-cert (if not in it)")
    tls.add_argument(
        "--tls-ca", metavar="FILE", help="the CA file of --tls-cert, printed for clients"
    )
    tls.add_argument(
        "--require-client-cert",
        action="store_true",
        help="ask every client for a certificate (mutual TLS); with --tls, one the throwaway "
        "CA issued, whose file is printed",
    )
    tls.add_argument(
        "--client-ca",
        metavar="FILE",
        help="with --tls-cert: accept client certificates from this CA (implies "
        "--require-client-cert)",
    )
    net = p.add_argument_group("network conditions (all off by default)")
    net.add_argument(
        "--latency-ms", type=float, default=_DEFAULT.latency_ms, help="added to every request"
    )
    net.add_argument(
        "--part-bandwidth", type=float, help="bytes per second cap on each part upload"
    )
    net.add_argument(
        "--link-bandwidth",
        type=float,
        help="bytes per second cap on every upload together: one link all connections share",
    )
    net.add_argument(
        "--error-rate", type=float, default=_DEFAULT.error_rate, help="fraction answered 500/503"
    )
    net.add_argument(
        "--rate-limit-rate",
        type=float,
        default=_DEFAULT.rate_limit_rate,
        help="fraction answered 429",
    )
    net.add_argument(
        "--drop-rate",
        type=float,
        default=_DEFAULT.drop_rate,
        help="fraction whose connection drops mid-body",
    )
    net.add_argument(
        "--retry-after", type=float, default=_DEFAULT.retry_after, help="Retry-After of 429s (s)"
    )
    net.add_argument(
        "--fault-ops", help="comma-separated operations the random faults apply to (default all)"
    )
    net.add_argument("--rate-limit-per-key", type=float, help="requests per second per key")
    net.add_argument(
        "--fault-seed", type=int, default=_DEFAULT.fault_seed, help="seed of the fault dice"
    )


async def serve(args: argparse.Namespace, out: Output) -> int:
    from asyncclient.testing import (
        OPERATIONS,
        FakeService,
        NetworkConditions,
        SeedError,
        ServiceSettings,
    )

    json_mode = read(Globals, args).json
    opts = read(ServeOptions, args)

    for flag, value in (
        ("--error-rate", opts.error_rate),
        ("--rate-limit-rate", opts.rate_limit_rate),
        ("--drop-rate", opts.drop_rate),
    ):
        if not 0.0 <= value <= 1.0:
            raise CommandError(f"{flag} {value} is not a fraction: give a number from 0 to 1")
    if opts.speed <= 0:
        raise CommandError(f"--speed {opts.speed} must be above 0 (1 is real time)")
    if opts.tls and not opts.tls_cert:
        from asyncclient._core._extras import require

        require("serve --tls", "tls", "trustme")  # before the port is taken
    settings_kwargs: dict[str, Any] = {}
    if opts.part_bytes:
        settings_kwargs["part_bytes"] = opts.part_bytes
    if opts.max_bytes:
        settings_kwargs["max_bytes"] = opts.max_bytes
    fault_ops = None
    if opts.fault_ops:
        fault_ops = frozenset(op.strip() for op in opts.fault_ops.split(",") if op.strip())
        unknown = sorted(fault_ops - OPERATIONS)
        if unknown:
            known = sorted(OPERATIONS)
            raise CommandError(
                f"--fault-ops {unknown[0]} is not an operation of the service: use "
                f"{', '.join(known)}{did_you_mean(unknown[0], known)}"
            )
    try:
        conditions = NetworkConditions(
            latency_ms=opts.latency_ms,
            part_bandwidth=opts.part_bandwidth,
            link_bandwidth=opts.link_bandwidth,
            error_rate=opts.error_rate,
            rate_limit_rate=opts.rate_limit_rate,
            drop_rate=opts.drop_rate,
            retry_after=opts.retry_after,
            ops=fault_ops,
            rate_limit_per_key=opts.rate_limit_per_key,
            seed=opts.fault_seed,
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    try:
        service = FakeService(
            seed=opts.seed,
            host=opts.host,
            port=opts.port,
            speed=opts.speed,
            settings=ServiceSettings(**settings_kwargs),
            conditions=conditions,
            dialect=opts.dialect,
            tls=opts.tls,
            tls_cert=opts.tls_cert,
            tls_key=opts.tls_key,
            tls_ca=opts.tls_ca,
            require_client_cert=opts.require_client_cert,
            client_ca=opts.client_ca,
        )
        await service.start()
    except (SeedError, ValueError) as exc:
        raise CommandError(str(exc)) from exc
    except OSError as exc:
        raise CommandError(
            f"cannot listen on {opts.host}:{opts.port}: {exc.strerror}; choose another --port"
        ) from exc
    try:
        info = service.seed_info()
        started_at = service.clock.started_at
        if json_mode:
            out.json(
                {
                    "baseUrl": service.url,
                    "caFile": _path(service.ca_file),
                    "clientCertFile": _path(service.client_cert_file),
                    "dialect": service.dialect.name,
                    **info,
                    "speed": opts.speed,
                    "serviceTimeStart": service.clock.started_at_iso,
                }
            )
        else:
            out.data(
                f"Test-Run Service emulator on {service.url}  (speed x{opts.speed:g}, "
                f"dialect {service.dialect.name})"
            )
            out.data(f"  {_time_note(started_at, opts.speed)}")
            first_key = info["keys"][0]["key"] if info["keys"] else "KEY"
            out.data(f"  export ASYNCCLIENT_BASE_URL={service.url} ASYNCCLIENT_API_KEY={first_key}")
            if service.ca_file is not None:
                out.data(f"  export ASYNCCLIENT_CA_FILE={service.ca_file}")
            if service.client_cert_file is not None:
                out.data(f"  export ASYNCCLIENT_CLIENT_CERT={service.client_cert_file}")
            elif service.tls and (opts.require_client_cert or opts.client_ca):
                out.data("  clients must present a certificate from --client-ca (--client-cert)")
            for project in info["projects"]:
                out.data(f"  project {project['id']}  {project['name']}  ({project['plan']} plan)")
            for key in info["keys"]:
                projects = ", ".join(key["projects"])
                out.data(f"  key {key['key']}  can {key['capability']}  ({projects})")
            out.data("Ctrl-C stops it.")
        await asyncio.Event().wait()  # until Ctrl-C or SIGTERM cancels us (exit 0: run_handler)
    finally:
        await service.stop()
        out.info("stopped")
    return EXIT_OK


def _path(path: Any) -> str | None:
    return None if path is None else str(path)


def _time_note(started_at: float, speed: float) -> str:
    """What a user comparing the service's timestamps with their own clock needs to know."""
    start = format_time(datetime.fromtimestamp(started_at, UTC))
    if speed == 1:
        return f"service time started at {start} UTC (now) and runs at the wall clock's pace"
    pace = "faster" if speed > 1 else "slower"
    return (
        f"service time started at {start} UTC (now) and runs x{speed:g} {pace} than your "
        "clock: runs' times are shown on yours, their durations in device time"
    )
