"""The measurement workload: a Llama-style decoder trained with torch.distributed.

Run under torchrun, one process per GPU (or CPU process with gloo)::

    torchrun --standalone --nproc-per-node N -m collectors.workload \\
        --spec SPEC.json --result RESULT.json

`SPEC.json` is a `collectors.spec.RunSpec`; rank 0 writes a `collectors.spec.RunResult` to
`RESULT.json` (atomically), also when the run fails (status `oom` or `failed` with the error);
the processes then exit non-zero. Each rank prints one `WORKLOAD_LAYOUT {json}` line describing
what it built (mesh, wrappers, DTensor placements, pipeline stages, checkpointed modules,
forward passes run). Modules: `model` (the decoder and its synthetic data), `parallelize`
(the `ParallelConfig` → DeviceMesh layout and the training step), `__main__` (timing and
results). Importing this package imports no torch.
"""
