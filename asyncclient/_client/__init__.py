"""Reaching the service: the request core (`_transport`: one attempt, the retries, request
ids), how requests travel (`_network`: proxies, TLS trust, bounded reads), downloads of run
files (`_download`), outages told once (`_outage`), OpenTelemetry spans and metrics
(`_telemetry`), and AsyncSession (`_session`), one method per operation, which hands uploads,
watching and the flakiness analysis to their workflows.

May import: `_core`, `_local`, the package's values and the workflows below the session
(`upload`, `watch`, `flakiness`, `config`). Never: `reruns`, `quarantine`, `ci`, `_reports`,
`cli`, `mcp_server` or `testing` (tests/test_imports.py holds it).
"""
