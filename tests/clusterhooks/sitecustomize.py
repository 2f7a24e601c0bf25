"""Put first on a test cluster worker's PYTHONPATH (``LabCluster(hooks=...)``): in the Dask worker
process only, each trial of a campaign named ``judged-invalid`` is judged invalid after its real
analysis, as the local runner's tests fake an invalid verdict (tests/test_runner.py), so that
``--rerun-invalid`` on the cluster has an invalid trial to re-run, every time."""

import json
import sys

JUDGED_INVALID = "judged-invalid"
REASON = "judged invalid by the test cluster's worker"


def _judging_invalid(analyze):
    def analyze_then_judge(trial_dir, say):
        analyze(trial_dir, say)
        from fieldtest.analysis.metrics.schema import METRICS_FILE
        from fieldtest.record import ANALYSIS_DIR, read_trial

        if not read_trial(trial_dir).request.name.startswith(JUDGED_INVALID):
            return
        path = trial_dir / ANALYSIS_DIR / METRICS_FILE
        metrics = json.loads(path.read_text())
        metrics["stack"] = {**(metrics.get("stack") or {}), "valid": False, "invalid_reasons": [REASON]}
        path.write_text(json.dumps(metrics))

    return analyze_then_judge


if "distributed.cli.dask_worker" in sys.orig_argv:  # not the trial's own processes
    import fieldtest.runner.cluster as cluster

    cluster.analyze = _judging_invalid(cluster.analyze)
