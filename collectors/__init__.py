"""What runs on GPU nodes: telemetry samplers, the PyTorch training workload, framework
adapters, campaign planning and launchers. May import torch; `advisor` never imports this
package (it would pull torch into a scheduler's process)."""
