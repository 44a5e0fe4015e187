"""Floor 6: the workflow's plan (content-addressed stages), the validated config, plan-time cluster
checks, job sizing, the CPU rehearsal, hub prefetch and the SLURM accounting.
"""
