"""Data-parallel training over MPI: the process's place in the job and communication figures.

Launch a script with ``mpirun -np N /usr/bin/python3 script.py``; a TrainingSession (or ORTTrainer)
then averages its gradients over the N ranks (see docs/distributed.md). MPI starts on first use.
"""
from . import _C


def launch_info():
    """The launcher's view from the environment, without starting MPI:
    ``{"rank", "size", "local_rank", "local_size", "launched"}``."""
    return _C._distributed_launch_info()


def mpi_available():
    """True when this onnxtrain was built with MPI."""
    return _C._distributed_mpi_available()


def world_rank():
    """Rank in the MPI job (starts MPI under a launcher with more than one rank; 0 otherwise)."""
    return _C._distributed_world_rank()


def world_size():
    """Ranks in the MPI job (1 outside a launcher)."""
    return _C._distributed_world_size()


def barrier():
    """Waits for every rank (no-op with one rank)."""
    _C._distributed_barrier()


def comm_stats():
    """This rank's communication since the last reset: ``{"collectives", "bytes", "comm_seconds",
    "wait_seconds"}``; the overlap share (communication hidden behind the backward pass) is
    ``1 - wait_seconds / comm_seconds``."""
    return _C._distributed_comm_stats()


def reset_comm_stats():
    _C._distributed_reset_comm_stats()
