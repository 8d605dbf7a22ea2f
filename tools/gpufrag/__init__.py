"""The FGD paper's experiment (``omega experiment gpu-frag``): GPU placement policies on an openb
node list under a workload inflated from a pod list, no departures. See docs/GPU.md."""
