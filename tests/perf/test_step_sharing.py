"""The step model prices each distinct micro-batch once and shares it among the layouts that
run it (`step.COMPUTE_KEYS`): a layout's figures must not depend on which others are predicted
beside it."""

import numpy as np
import pytest

from advisor import catalog
from advisor.core.parallel import Job
from advisor.core.space import space_table
from advisor.perf.columns import config_columns, take
from advisor.perf.step import step_arrays


@pytest.mark.parametrize("model, platform, gpus, finetune, framework", [
    ("llama3-70b", "h200", 64, "none", "megatron"),
    ("mixtral-8x22b", "h100", 64, "none", "torchtitan"),
    ("llama3-8b", "b200", 8, "lora", "megatron"),
    ("llama3-8b", "h100", 8, "none", "pytorch"),
])
def test_a_layout_s_step_does_not_depend_on_its_batch(model, platform, gpus, finetune,
                                                      framework):
    job = Job(catalog.load_model(model), catalog.load_platform(platform), gpus, 4096, 128,
              finetune=finetune)
    space = space_table(job)
    rows = np.random.default_rng(0).choice(len(space), size=min(60, len(space)),
                                           replace=False)
    cols = config_columns(space.take(np.sort(rows)))
    together = step_arrays(job.model, job.platform, cols, framework=framework)
    for i in range(0, len(rows), 7):
        alone = step_arrays(job.model, job.platform, take(cols, np.array([i])),
                            framework=framework)
        for name in ("step_time_s", "compute_s", "recompute_s", "tp_comm_s", "dp_comm_s",
                     "avg_power_w", "peak_power_w"):
            assert np.isclose(alone[name][0], together[name][i], rtol=1e-9), (name, i)
