! perfkit lab, Fortran: a 1-D periodic halo exchange followed by an MPI_ALLREDUCE every step.
!
! Usage: lab_f STEPS STEP EXTRA BYTES LATE_RANK [RECORD]
!   STEPS time steps; STEP compute per step [s] (a sleep); EXTRA extra compute of rank LATE_RANK [s];
!   BYTES halo message size [B]; RECORD: write each rank's realised compute intervals to RECORD.<rank>.
! Built with `use mpi` by default, with `include 'mpif.h'` when PK_LAB_MPIF_H is defined.
! The sequence of MPI calls is mirrored by perfkit/collect/lab/scenarios.py (scenario "fortran_halo").
program pk_lab_fortran
#ifndef PK_LAB_MPIF_H
  use mpi
#endif
  use, intrinsic :: iso_c_binding, only: c_char, c_double, c_int, c_null_char
  implicit none
#ifdef PK_LAB_MPIF_H
  include 'mpif.h'
#endif
  interface
    subroutine pk_lab_timed_sleep(seconds) bind(C, name="pk_lab_timed_sleep")
      import :: c_double
      real(c_double), value :: seconds
    end subroutine pk_lab_timed_sleep
    function pk_lab_write_record(path, rank) result(status) bind(C, name="pk_lab_write_record")
      import :: c_char, c_int
      character(kind=c_char), dimension(*), intent(in) :: path
      integer(c_int), value :: rank
      integer(c_int) :: status
    end function pk_lab_write_record
  end interface
  integer, parameter :: tag_rightward = 1, tag_leftward = 2
  integer :: ierr, rank, nprocs, left, right, step, steps, nbytes, late_rank
  integer :: reqs(4)
  double precision :: step_s, extra_s, compute_s
  double precision :: local(1), total(1)
  character(len=1), allocatable :: rbuf_l(:), rbuf_r(:), sbuf_l(:), sbuf_r(:)
  character(len=64) :: arg
  character(len=4096) :: record

  call get_command_argument(1, arg)
  read (arg, *) steps
  call get_command_argument(2, arg)
  read (arg, *) step_s
  call get_command_argument(3, arg)
  read (arg, *) extra_s
  call get_command_argument(4, arg)
  read (arg, *) nbytes
  call get_command_argument(5, arg)
  read (arg, *) late_rank
  call get_command_argument(6, record)

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nprocs, ierr)
  allocate (rbuf_l(max(nbytes, 1)), rbuf_r(max(nbytes, 1)), sbuf_l(max(nbytes, 1)), sbuf_r(max(nbytes, 1)))
  sbuf_l = 'l'
  sbuf_r = 'r'
  left = modulo(rank - 1, nprocs)
  right = modulo(rank + 1, nprocs)
  local(1) = rank
  call MPI_BARRIER(MPI_COMM_WORLD, ierr)
  do step = 0, steps - 1
    compute_s = step_s
    if (rank == late_rank) compute_s = step_s + extra_s
    call pk_lab_timed_sleep(real(compute_s, c_double))
    call MPI_IRECV(rbuf_l, nbytes, MPI_BYTE, left, tag_rightward, MPI_COMM_WORLD, reqs(1), ierr)
    call MPI_IRECV(rbuf_r, nbytes, MPI_BYTE, right, tag_leftward, MPI_COMM_WORLD, reqs(2), ierr)
    call MPI_ISEND(sbuf_r, nbytes, MPI_BYTE, right, tag_rightward, MPI_COMM_WORLD, reqs(3), ierr)
    call MPI_ISEND(sbuf_l, nbytes, MPI_BYTE, left, tag_leftward, MPI_COMM_WORLD, reqs(4), ierr)
    call MPI_WAITALL(4, reqs, MPI_STATUSES_IGNORE, ierr)
    call MPI_ALLREDUCE(local, total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  end do
  deallocate (rbuf_l, rbuf_r, sbuf_l, sbuf_r)
  if (pk_lab_write_record(trim(record) // c_null_char, int(rank, c_int)) /= 0) then
    write (0, '(a)') 'lab_f: cannot write ' // trim(record)
  end if
  call MPI_FINALIZE(ierr)
end program pk_lab_fortran
