"""tools — commands that measure the project rather than teach it: the step's cost (bench), the GPU check
(gpu_check, tools/gpu_check.sh), the built-in world's single-domain checks (world), and the CODING ablation."""
