"""Campaigns end to end: on one machine (`campaign`), split across jobs and nodes (`distributed/`), as Slurm
jobs (`slurm`), and a bisect of whole campaigns (`bisect`)."""
