"""The search's memory check computes each layout's memory once for its overlap-on and
overlap-off forms (`space_memory`): the memory model must not read those switches, and the
shortcut must give what the model gives row by row."""

import numpy as np
import pytest

from advisor import catalog
from advisor.core.parallel import Job
from advisor.core.space import space_table
from advisor.perf.columns import config_columns, full_length
from advisor.perf.memory import NOT_READ, memory_arrays, space_memory


@pytest.mark.parametrize("model, platform, gpus", [("llama3-70b", "h200", 64),
                                                   ("mixtral-8x22b", "h100", 64),
                                                   ("deepseek-v3", "h100", 256)])
def test_space_memory_is_the_memory_model_row_by_row(model, platform, gpus):
    job = Job(catalog.load_model(model), catalog.load_platform(platform), gpus, 4096, 256)
    cols = config_columns(space_table(job))
    n = len(cols["tp"])
    whole = full_length(memory_arrays(job.model, platform=job.platform, cols=cols), n)
    shared = full_length(space_memory(job.model, platform=job.platform, cols=cols), n)
    assert set(whole) == set(shared)
    for key, values in whole.items():
        assert np.array_equal(np.asarray(values), np.asarray(shared[key])), key
    # The switches it shares across are ones the model does not read.
    flipped = {k: (~v if k in NOT_READ else v) for k, v in cols.items()}
    again = full_length(memory_arrays(job.model, platform=job.platform, cols=flipped), n)
    assert all(np.array_equal(np.asarray(whole[k]), np.asarray(again[k])) for k in whole)
