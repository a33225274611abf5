/* api/cmd/slurm.h - `troupe slurm` (slurm.c): a cluster for the length of a Slurm job. */
#ifndef TR_API_CMD_SLURM_H
#define TR_API_CMD_SLURM_H

/* Runs `troupe slurm [options] -- COMMAND...` (argv as main's; self: this program's
 * path, which the nodes run). Returns the exit status. */
int tr__cmd_slurm(const char *self, int argc, char **argv);

#endif
