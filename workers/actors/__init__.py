"""ARTOS elastic actors (artos §4.3): a zygote that prepared the actor program once forks each
actor per invocation; the actor pins itself to its cores, restores its own checkpoint, samples,
delivers its batch to a buffer, checkpoints and exits. Pre-warming from the workload monitor
forks and restores the next iteration's actors before the parameters arrive.

CRIU does not work on these machines, so this is the restore path: the process image is
re-created by ``fork`` from the prepared zygote, the actor's own state from its checkpoint.
"""
