/* An MPI job for softverbs exec: ranks 0 and 1 ping-pong (argv[1] times, default
 * 1000, with argv[2] bytes, default 8), then every rank takes part in an allreduce
 * whose result is checked (exit 1 if wrong). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = argc > 1 ? atoi(argv[1]) : 1000;
    int bytes = argc > 2 ? atoi(argv[2]) : 8;
    if (iters < 1 || bytes < 1)
        MPI_Abort(MPI_COMM_WORLD, 2);
    char *buf = calloc((size_t)bytes, 1);
    if (!buf)
        MPI_Abort(MPI_COMM_WORLD, 2);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (rank == 0) {
            buf[0] = (char)i;
            MPI_Send(buf, bytes, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, bytes, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (buf[0] != (char)(i + 1) || buf[bytes - 1] != (char)(i + 1)) {
                fprintf(stderr, "pingpong: round %d came back wrong\n", i);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        } else if (rank == 1) {
            MPI_Recv(buf, bytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            buf[0] = buf[bytes - 1] = (char)(buf[0] + 1);
            MPI_Send(buf, bytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
        }
    }
    double t1 = MPI_Wtime();
    long mine = rank + 1, sum = 0, want = (long)size * (size + 1) / 2;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("pingpong %d x %d bytes: half-rtt %.1f us, %.2f MB/s; allreduce %ld (expect %ld)\n",
               iters, bytes, (t1 - t0) / (2.0 * iters) * 1e6,
               2.0 * iters * bytes / (t1 - t0) / 1e6, sum, want);
    free(buf);
    MPI_Finalize();
    return sum == want ? 0 : 1;
}
