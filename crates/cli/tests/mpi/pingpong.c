/* An MPI job for softverbs exec: ranks 0 and 1 ping-pong 1000 times, then every
 * rank takes part in an allreduce whose result is checked (exit 1 if wrong). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char buf[8] = {0};
    double t0 = MPI_Wtime();
    for (int i = 0; i < 1000; i++) {
        if (rank == 0) {
            MPI_Send(buf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
        }
    }
    double t1 = MPI_Wtime();
    long mine = rank + 1, sum = 0, want = (long)size * (size + 1) / 2;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("pingpong half-rtt %.1f us; allreduce %ld (expect %ld)\n",
               (t1 - t0) / 2000 * 1e6, sum, want);
    MPI_Finalize();
    return sum == want ? 0 : 1;
}
