// Data-parallel training over MPI: the process's place in the job and the communication figures.
//
// Launch with `mpirun -np N onnxtrain train ...` (or a Python script): every rank runs the same
// program; a TrainingSession whose parameters (or the MPI environment) say world_size > 1 averages
// its gradients across the ranks with allreduce nodes inside its training plan (docs/distributed.md).
// MPI starts on first use (a process that never trains distributed never initializes it) and
// finishes at exit. Every collective runs on one communication thread; a collective that does not
// complete within the timeout (ONNXTRAIN_COMM_TIMEOUT seconds, default 60) means another rank died
// or stopped: the process prints an error naming the collective and exits with status 70 instead of
// hanging (mpirun then ends the job).
#pragma once

#include <cstdint>
#include <string>

namespace onnxtrain::distributed {

/// The job as the launcher describes it in the environment (OMPI_COMM_WORLD_*, PMI_*, or
/// onnxtrain's own ONNXTRAIN_WORLD_*), read without starting MPI.
struct LaunchInfo {
  int rank = 0, size = 1;              ///< world rank and size (0, 1 outside a launcher)
  int local_rank = 0, local_size = 1;  ///< rank and count of the ranks on this machine
  bool launched = false;               ///< a launcher set the variables
};
LaunchInfo launch_info();

/// True when this build has MPI (OpenMPI from the project's dependency script).
bool mpi_available();
/// True once MPI is initialized in this process.
bool initialized();
/// World rank and size; initializes MPI when the launcher says size > 1 (else 0 and 1).
int world_rank();
int world_size();
/// Waits for every rank (a no-op at world size 1).
void barrier();

/// Communication of the data-parallel steps since the last reset (this rank's view).
struct CommStats {
  int64_t collectives = 0;   ///< collective operations run
  int64_t bytes = 0;         ///< bytes this rank contributed to them (the payload, not the wire traffic)
  double comm_seconds = 0;   ///< time the communication thread spent inside them
  /// Time the training step spent waiting for them: comm_seconds - wait_seconds was hidden behind
  /// the rest of the backward pass (overlap share = 1 - wait_seconds / comm_seconds).
  double wait_seconds = 0;
};
CommStats comm_stats();
void reset_comm_stats();

}  // namespace onnxtrain::distributed
