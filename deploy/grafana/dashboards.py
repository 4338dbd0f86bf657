#!/usr/bin/env python3
"""The Grafana dashboards of unloadkv, as code: this file is their source.

    python3 deploy/grafana/dashboards.py              # rewrites deploy/grafana/dashboards/
    python3 deploy/grafana/dashboards.py --out DIR    # writes them elsewhere (the check diffs)

tests/deploy:grafana_dashboards_test fails when the committed JSON differs from what this
writes, and when a panel lacks a title, a unit or a description. Panels query the recording
rules of deploy/prometheus/rules/recording.yml where one exists. Every query is run against a
real Prometheus scraping real kvservers by tests/deploy:prometheus_panels_test.
"""

import argparse
import json
import os

# Every query filters by these; Grafana substitutes them (multi-value, "All" = every value).
SELECTOR = 'cluster=~"$cluster", instance=~"$instance"'


def panel(title, description, unit, targets, kind="timeseries", width=12, stack=False):
    """A panel of `kind` with `targets` [(expr, legend)]; laid out later."""
    defaults = {"unit": unit}
    if kind == "timeseries":
        defaults["custom"] = {
            "lineWidth": 1,
            "fillOpacity": 10 if stack else 0,
            "stacking": {"mode": "normal" if stack else "none"},
        }
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}}
        if kind == "timeseries"
        else {"reduceOptions": {"calcs": ["lastNotNull"]}},
        "targets": [
            {"expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i)}
            for i, (expr, legend) in enumerate(targets)
        ],
        "_width": width,
    }


def layout(panels):
    """Assigns ids and grid positions: panels fill rows of 24 columns, 8 units high."""
    x = y = 0
    out = []
    for i, p in enumerate(panels, start=1):
        p = dict(p)
        width = p.pop("_width")
        if x + width > 24:
            x, y = 0, y + 8
        p["id"] = i
        p["gridPos"] = {"x": x, "y": y, "w": width, "h": 8}
        out.append(p)
        x += width
    return out


def variable(name, label, query):
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def dashboard(uid, title, description, panels):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["unloadkv"],
        "timezone": "browser",
        "schemaVersion": 36,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                variable("cluster", "Cluster", 'label_values(up{job="unloadkv"}, cluster)'),
                variable(
                    "instance",
                    "Instance",
                    'label_values(up{job="unloadkv", cluster=~"$cluster"}, instance)',
                ),
            ]
        },
        "annotations": {"list": []},
        "links": [
            {"title": "unloadkv", "type": "dashboards", "tags": ["unloadkv"], "asDropdown": True}
        ],
        "panels": layout(panels),
    }


def overview():
    s = SELECTOR
    return dashboard(
        "unloadkv-overview",
        "unloadkv / Overview",
        "Requests, latency, errors, connections, keys and arena of every kvserver.",
        [
            panel(
                "Nodes up",
                "Targets Prometheus scraped successfully (1) or not (0).",
                "none",
                [(f'up{{job="unloadkv", {s}}}', "{{instance}}")],
                kind="stat",
                width=6,
            ),
            panel(
                "Keys",
                "Keys in each node's index (every shard it holds a replica of).",
                "short",
                [(f"unloadkv_keys{{{s}}}", "{{instance}}")],
                kind="stat",
                width=6,
            ),
            panel(
                "Client connections",
                "Client connections open on each node (admitted, past the handshake).",
                "short",
                [(f"unloadkv_connections{{{s}}}", "{{instance}}")],
                width=12,
            ),
            panel(
                "Requests by method and code",
                "RPC requests answered per second, by method and canonical status code "
                "(recording rule instance_method_code:unloadkv_rpc_requests:rate1m).",
                "reqps",
                [
                    (
                        f"sum by (method, code) "
                        f"(instance_method_code:unloadkv_rpc_requests:rate1m{{{s}}})",
                        "{{method}} {{code}}",
                    )
                ],
                stack=True,
            ),
            panel(
                "Server-side errors",
                "Share of requests that failed on the server's side (unavailable, internal, "
                "deadline_exceeded, resource_exhausted, ...); not_found and a failover's "
                "aborted are not errors. Alert UnloadkvHighErrorRatio at 1%.",
                "percentunit",
                [(f"instance:unloadkv_rpc_errors:ratio_rate5m{{{s}}}", "{{instance}}")],
            ),
            panel(
                "Latency p50 by method",
                "Median server-side RPC latency, arrival to reply, per node and method.",
                "s",
                [
                    (
                        f"instance_method:unloadkv_rpc_latency_seconds:p50_1m"
                        f'{{{s}, method=~"put|get|delete|scan|grant"}}',
                        "{{instance}} {{method}}",
                    )
                ],
            ),
            panel(
                "Latency p99 by method",
                "99th percentile of server-side RPC latency, arrival to reply, per node and "
                "method. Alert UnloadkvHighLatencyP99 above 10 ms.",
                "s",
                [
                    (
                        f"instance_method:unloadkv_rpc_latency_seconds:p99_1m"
                        f'{{{s}, method=~"put|get|delete|scan|grant"}}',
                        "{{instance}} {{method}}",
                    )
                ],
            ),
            panel(
                "Arena used and free",
                "Value arena bytes held by values and grants (used) and the rest (free chunks and "
                "free slots of a size class).",
                "bytes",
                [
                    (f"unloadkv_arena_used_bytes{{{s}}}", "{{instance}} used"),
                    (f"unloadkv_arena_free_bytes{{{s}}}", "{{instance}} free"),
                ],
            ),
            panel(
                "Arena used",
                "Share of the value arena in use. Alert UnloadkvArenaNearlyFull above 90%.",
                "percentunit",
                [(f"instance:unloadkv_arena_used:ratio{{{s}}}", "{{instance}}")],
            ),
            panel(
                "Connections refused",
                "Admission attempts given up on per second, by reason (docs/kv.md).",
                "short",
                [
                    (
                        f"sum by (reason) (rate(unloadkv_connections_refused_total{{{s}}}[1m]))",
                        "{{reason}}",
                    )
                ],
            ),
            panel(
                "Half-open connections",
                "Admitted connections the client has sent no message on yet (capped, released at "
                "the handshake deadline).",
                "short",
                [(f"unloadkv_connections_half_open{{{s}}}", "{{instance}}")],
            ),
        ],
    )


def engine():
    s = SELECTOR
    return dashboard(
        "unloadkv-engine",
        "unloadkv / Write engine",
        "The offload/unload write engine: which path value writes take, their latency, the "
        "staging rings and the unload workers' refusals.",
        [
            panel(
                "Value writes by path",
                "Value writes named by PUTs per second, by the path the client posted them on "
                "(unknown: the write waited behind earlier work).",
                "wps",
                [
                    (
                        f"sum by (path) (instance_path:unloadkv_value_writes:rate1m{{{s}}})",
                        "{{path}}",
                    )
                ],
                stack=True,
            ),
            panel(
                "Unloaded share",
                "Share of value writes unloaded (sent into the staging ring and copied by a "
                "server core) over 5 minutes.",
                "percentunit",
                [(f"instance:unloadkv_value_writes_unloaded:ratio_rate5m{{{s}}}", "{{instance}}")],
            ),
            panel(
                "Engine write latency p50 by path",
                "Median post-to-completion latency of the writes this node initiated "
                "(replication to backups), by path.",
                "s",
                [
                    (
                        f"instance_path:unloadkv_engine_write_latency_seconds:p50_1m{{{s}}}",
                        "{{instance}} {{path}}",
                    )
                ],
            ),
            panel(
                "Engine write latency p99 by path",
                "99th percentile post-to-completion latency of the writes this node initiated, by "
                "path.",
                "s",
                [
                    (
                        f"instance_path:unloadkv_engine_write_latency_seconds:p99_1m{{{s}}}",
                        "{{instance}} {{path}}",
                    )
                ],
            ),
            panel(
                "Engine writes by path and result",
                "Writes this node initiated per second, by path and result (error: the write "
                "failed its connection).",
                "wps",
                [
                    (
                        f"sum by (instance, path, result) "
                        f"(rate(unloadkv_engine_writes_total{{{s}}}[1m]))",
                        "{{instance}} {{path}} {{result}}",
                    )
                ],
            ),
            panel(
                "Staged writes applied",
                "Staged writes from peers that this node's unload workers validated and copied "
                "into place, per second.",
                "wps",
                [
                    (
                        f"rate(unloadkv_unload_applied_writes_total{{{s}}}[1m])",
                        "{{instance}}",
                    )
                ],
            ),
            panel(
                "Staging ring occupancy",
                "Staging slots in use, and the slots there are, on the connection that last "
                "posted an unloaded write from this node. Alert UnloadkvStagingRingSaturated "
                "above 90%.",
                "short",
                [
                    (f"unloadkv_staging_ring_slots_in_use{{{s}}}", "{{instance}} in use"),
                    (f"unloadkv_staging_ring_slots{{{s}}}", "{{instance}} slots"),
                ],
            ),
            panel(
                "Policy switches",
                "Times a path policy changed its preferred path for a class of writes, per "
                "minute.",
                "short",
                [
                    (
                        f"increase(unloadkv_policy_switches_total{{{s}}}[1m])",
                        "{{instance}}",
                    )
                ],
            ),
            panel(
                "Target models: cells by regime",
                "Cells (size class x heat class) of the per-target models this node's adaptive "
                "policies share, by the regime their last probe chose, and probes in flight (one "
                "per cell and target at most). Zero under a static policy.",
                "short",
                [
                    (
                        f"sum by (instance, regime) "
                        f"(unloadkv_engine_target_model_cells{{{s}}})",
                        "{{instance}} {{regime}}",
                    ),
                    (f"unloadkv_engine_target_model_probes{{{s}}}", "{{instance}} probes"),
                ],
                width=8,
            ),
            panel(
                "Target models: probed latency by path",
                "Mean over known cells of the latency each path showed in its last probe.",
                "s",
                [
                    (
                        f"unloadkv_engine_target_model_latency_seconds{{{s}}}",
                        "{{instance}} {{path}}",
                    )
                ],
                width=8,
            ),
            panel(
                "Target models: oldest result",
                "Age of the oldest probe result any target model still routes by: a model that "
                "stops being probed keeps routing by what it last learned.",
                "s",
                [
                    (
                        f"unloadkv_engine_target_model_oldest_age_seconds{{{s}}}",
                        "{{instance}}",
                    )
                ],
                width=8,
            ),
            panel(
                "Validation failures by reason",
                "Staged writes the unload workers refused per second, by reason (the NIC's "
                "checks: unknown key, no permission, out of bounds; bad header or sequence). Any "
                "is an alert.",
                "short",
                [
                    (
                        f"sum by (reason) "
                        f"(rate(unloadkv_unload_validation_failures_total{{{s}}}[5m]))",
                        "{{reason}}",
                    )
                ],
                width=24,
            ),
        ],
    )


def cluster():
    s = SELECTOR
    return dashboard(
        "unloadkv-cluster",
        "unloadkv / Cluster",
        "Shards, roles, epochs, failovers and replication of a replicated unloadkv cluster "
        "(docs/cluster.md).",
        [
            panel(
                "Shards by state",
                "Shards in each state of the cluster map (serving, under-replicated, "
                "primary-down, no-primary), as the selected nodes last read it.",
                "short",
                [
                    (
                        f"count by (state) "
                        f"(max by (cluster, shard, state) (unloadkv_shard_state{{{s}}}) == 1)",
                        "{{state}}",
                    )
                ],
            ),
            panel(
                "Shards by role",
                "Shards each node holds as primary and as backup.",
                "short",
                [
                    (
                        f"sum by (instance, role) (unloadkv_shard_role{{{s}}})",
                        "{{instance}} {{role}}",
                    )
                ],
                stack=True,
            ),
            panel(
                "Replicas per shard",
                "On each shard's primary: replicas in its group per the cluster map, and the "
                "configured group size. Alert UnloadkvShardUnderReplicated when below.",
                "short",
                [
                    (f"max by (shard) (unloadkv_shard_replicas{{{s}}})", "shard {{shard}}"),
                    (
                        f"max by (shard) (unloadkv_shard_replicas_wanted{{{s}}})",
                        "shard {{shard}} wanted",
                    ),
                ],
            ),
            panel(
                "Shard epochs",
                "Epoch of each shard as each replica holds it: it grows at every membership "
                "change and failover.",
                "none",
                [(f"unloadkv_shard_epoch{{{s}}}", "{{instance}} shard {{shard}}")],
            ),
            panel(
                "Failovers",
                "Shards a node took over as primary from a failed primary, per 10 minutes.",
                "short",
                [(f"increase(unloadkv_failovers_total{{{s}}}[10m])", "{{instance}}")],
            ),
            panel(
                "Replication records in flight",
                "Replication requests queued or unanswered on each primary's link to a backup: "
                "its lag in records. Alert UnloadkvReplicationLag above 256.",
                "short",
                [
                    (
                        f"unloadkv_replication_records_in_flight{{{s}}}",
                        "{{instance}} to {{backup}}",
                    )
                ],
            ),
            panel(
                "Replication writes by backup and path",
                "Value writes a primary made into each backup's arena per second, by engine path.",
                "wps",
                [
                    (
                        f"sum by (instance, backup, path) "
                        f"(rate(unloadkv_replication_value_writes_total{{{s}}}[1m]))",
                        "{{instance}} to {{backup}} {{path}}",
                    )
                ],
            ),
            panel(
                "Catch-up transfer",
                "Value bytes sent to joining backups by state transfer, per second.",
                "Bps",
                [(f"rate(unloadkv_catchup_bytes_total{{{s}}}[1m])", "{{instance}}")],
            ),
            panel(
                "State transfers in flight",
                "Share of each state transfer in flight acknowledged by the joining node (a node "
                "joining, a move, a rejoin), on its primary; the series exist only while one "
                "is under way. kvclient cluster status shows the bytes and an ETA; alert "
                "UnloadkvTransferStuck after 10 minutes without progress.",
                "percentunit",
                [
                    (
                        f"unloadkv_transfer_sent_bytes{{{s}}} / unloadkv_transfer_bytes{{{s}}}",
                        "{{instance}} shard {{shard}} to {{backup}}",
                    )
                ],
            ),
            panel(
                "Placer",
                "1 on the node making automatic placement decisions (kvclient cluster config "
                "--auto_rebalance=true); 0 on the others and with the policy off.",
                "none",
                [(f"unloadkv_placer{{{s}}}", "{{instance}}")],
            ),
            panel(
                "Placement changes",
                "Moves, splits and trims the placer made, per minute, by outcome (failed: "
                "undone after a refusal or a timeout; alert UnloadkvPlacementFailing).",
                "short",
                [
                    (
                        f"sum by (kind, outcome) "
                        f"(increase(unloadkv_placement_changes_total{{{s}}}[1m]))",
                        "{{kind}} {{outcome}}",
                    )
                ],
            ),
            panel(
                "Shard sizes",
                "Live value bytes of each shard as its primary last measured them (automatic "
                "placement splits a shard above --max_shard_bytes).",
                "bytes",
                [(f"max by (shard) (unloadkv_shard_live_bytes{{{s}}})", "shard {{shard}}")],
            ),
            panel(
                "Lease valid",
                "1 while the node's etcd lease lets it serve reads locally; 0 after it lapsed, "
                "until it has registered again and reconciled with the map.",
                "none",
                [(f"unloadkv_lease_valid{{{s}}}", "{{instance}}")],
            ),
            panel(
                "Cluster map errors",
                "Cluster map reads, keepalives and transactions that failed, per second.",
                "short",
                [
                    (
                        f"rate(unloadkv_cluster_map_errors_total{{{s}}}[1m])",
                        "{{instance}}",
                    )
                ],
                width=24,
            ),
        ],
    )


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(here, "dashboards"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, build in (("overview", overview), ("engine", engine), ("cluster", cluster)):
        path = os.path.join(args.out, f"unloadkv-{name}.json")
        with open(path, "w") as f:
            json.dump(build(), f, indent=2, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
