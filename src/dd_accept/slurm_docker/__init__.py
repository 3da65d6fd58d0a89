"""A real Slurm cluster in Docker: image recipes, slurm.conf, lifecycle through the docker SDK.

Importing the package imports nothing heavy: the docker SDK and the templates load with the
modules that use them (`cluster`, `engine`, `images`, `slurm_conf`), so a plan, a scenario's
declaration or the pytest plugin can be read without them."""
