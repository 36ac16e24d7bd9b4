"""Reaching the service: the transport and its retry loop, the network (proxies, TLS,
bounded reads), downloads, outages told once, OpenTelemetry, and AsyncSession.
May import: `_core`, `_local`, the values and the workflows below the session (`upload`,
`watch`, `flakiness`, `config`); never `reruns`, `quarantine`, `ci`, `_reports`, `cli`,
`mcp_server` or `testing` (tests/across/test_imports.py).
"""
