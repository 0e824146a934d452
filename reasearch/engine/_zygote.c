/* The worker's zygote: a quiet copy of the warm worker that forks each evaluation's child.

   Why: a forked child shares every page of the process it was forked from, so each page that
   process writes afterwards is a copy-on-write fault (~2-3.5 us on this machine class). The
   worker writes a few hundred pages per evaluation (it runs Python: the request, the pump, the
   reply, the clean-up), and while a child is alive (one is always forked ahead) each of those
   writes copies a page, every evaluation. The zygote is forked from the worker once; from then on
   it waits in this C loop, which touches no Python object, and forks each child on request with
   CLONE_PARENT, so that the child is the worker's own (wait4, rusage, PR_SET_PDEATHSIG, the
   subreaper, all as before). The worker's pages are then shared with the zygote only, which never
   writes them: the worker copies each page once, the first time it writes it, not once per
   evaluation.

   Protocol on a SOCK_SEQPACKET pair: the worker sends one message (the child's parameters, bytes)
   with the child's four pipe ends attached (SCM_RIGHTS: result, stdout, stderr, request); the
   zygote forks, closes its copies of the ends, and answers with 8 bytes: the child's pid, or minus
   errno. The child returns from serve() with the message only, never to come back into this loop,
   once it has done here, in C, what each child does first (a few syscalls that in Python would also
   write to a dozen shared pages): a session of its own, SIGKILL when the worker dies (and exit if
   it died already), /dev/null on fd 0, its pipes on fds 1-4 (stdout, stderr, result, request), and
   every other descriptor closed, the zygote's socket among them; and, where that is all it takes
   (see _privilege.plain_uid_drop), its switch to the child uid.

   glibc caches the thread id in the thread's control block; a raw clone() does not update it, so
   the child passes its control block's tid field as CLONE_CHILD_SETTID (as glibc's own fork does),
   found through the descriptor glibc exports for debuggers (_thread_db_pthread_tid). Where that is
   missing (another C library, another architecture), available() is false and the worker forks
   its children itself. */

#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_FDS 8
#define MAX_MSG 65536

static long tid_offset = -1; /* byte offset of the tid in glibc's struct pthread, or -1 */

static int find_tid_offset(void)
{
#if defined(__x86_64__) || defined(__aarch64__)
    const uint32_t *desc = (const uint32_t *)dlvsym(RTLD_DEFAULT, "_thread_db_pthread_tid", "GLIBC_PRIVATE");
    if (desc == NULL || desc[0] != 32 || desc[1] != 1)
        return -1;
    pid_t *field = (pid_t *)((char *)pthread_self() + desc[2]);
    if (*field != (pid_t)syscall(SYS_gettid))
        return -1; /* not the layout we expect: do not write into it */
    return (long)desc[2];
#else
    return -1;
#endif
}

static long raw_clone_parent(void)
{
    unsigned long flags = CLONE_PARENT | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD;
    pid_t *ctid = (pid_t *)((char *)pthread_self() + tid_offset);
#if defined(__x86_64__)
    return syscall(SYS_clone, flags, NULL, NULL, ctid, 0UL);
#elif defined(__aarch64__)
    return syscall(SYS_clone, flags, NULL, NULL, 0UL, ctid);
#else
    (void)flags; (void)ctid;
    errno = ENOSYS;
    return -1;
#endif
}

static PyObject *zy_available(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(tid_offset >= 0);
}

/* pair(timeout_s): the socket pair; a read on the first end fails with EAGAIN after timeout_s. */
static PyObject *zy_pair(PyObject *self, PyObject *args)
{
    double timeout_s;
    if (!PyArg_ParseTuple(args, "d", &timeout_s))
        return NULL;
    if (!(timeout_s > 0 && timeout_s < 1e6))
        return PyErr_Format(PyExc_ValueError, "timeout_s must be a positive number of seconds");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    struct timeval tv = {.tv_sec = (time_t)timeout_s,
                         .tv_usec = (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    if (setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
        int err = errno;
        close(sv[0]);
        close(sv[1]);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("(ii)", sv[0], sv[1]);
}

/* send(sock, data, fds): one message with the descriptors attached. */
static PyObject *zy_send(PyObject *self, PyObject *args)
{
    int sock;
    Py_buffer data;
    PyObject *fds_obj;
    if (!PyArg_ParseTuple(args, "iy*O", &sock, &data, &fds_obj))
        return NULL;
    PyObject *seq = PySequence_Fast(fds_obj, "fds must be a sequence of ints");
    if (seq == NULL) {
        PyBuffer_Release(&data);
        return NULL;
    }
    Py_ssize_t nfds = PySequence_Fast_GET_SIZE(seq);
    if (nfds < 1 || nfds > MAX_FDS) {
        Py_DECREF(seq);
        PyBuffer_Release(&data);
        return PyErr_Format(PyExc_ValueError, "between 1 and %d descriptors", MAX_FDS);
    }
    int fds[MAX_FDS];
    for (Py_ssize_t i = 0; i < nfds; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            PyBuffer_Release(&data);
            return NULL;
        }
        fds[i] = (int)v;
    }
    Py_DECREF(seq);
    union {
        char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {.iov_base = data.buf, .iov_len = (size_t)data.len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = CMSG_SPACE(sizeof(int) * nfds)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
    ssize_t n;
    do {
        n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    PyBuffer_Release(&data);
    if (n < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static void child_failed(const char *what)
{
    dprintf(2, "sandbox child (forked by the zygote): %s failed: %s\n", what, strerror(errno));
    _exit(70);
}

/* The child's first steps (see the top of this file); exits on failure. */
static void wire_child(int devnull, const int *fds, int nfds, pid_t worker, long uid)
{
    if (nfds != 4) {
        errno = EINVAL;
        child_failed("receiving four pipe ends");
    }
    if (setsid() < 0)
        child_failed("setsid");
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
        child_failed("prctl(PR_SET_PDEATHSIG)");
    if (getppid() != worker)
        _exit(0); /* the worker died before the line above: nobody will ever send a request */
    /* fds: result, out, err, req, all >= 16 (moved there first), so no dup2 below overwrites one */
    if (dup2(devnull, 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0 || dup2(fds[0], 3) < 0 ||
        dup2(fds[3], 4) < 0)
        child_failed("dup2");
    if (syscall(SYS_close_range, 5U, ~0U, 0U) != 0) {
        for (int fd = 5; fd < 65536; fd++)
            close(fd);
    }
    /* Raw calls: this thread is the child's only one (glibc's wrappers would also signal threads
       that exist only in its bookkeeping). */
    if (uid >= 0) {
        if (syscall(SYS_setgroups, 0, NULL) != 0)
            child_failed("setgroups");
        if (syscall(SYS_setresgid, (gid_t)uid, (gid_t)uid, (gid_t)uid) != 0)
            child_failed("setresgid");
        if (syscall(SYS_setresuid, (uid_t)uid, (uid_t)uid, (uid_t)uid) != 0)
            child_failed("setresuid");
    }
}

/* serve(sock, devnull, uid): the zygote's loop. Returns only in a forked child, as its message. */
static PyObject *zy_serve(PyObject *self, PyObject *args)
{
    int sock, devnull;
    long uid;
    if (!PyArg_ParseTuple(args, "iil", &sock, &devnull, &uid))
        return NULL;
    pid_t worker = getppid();
    if (tid_offset < 0) {
        PyErr_SetString(PyExc_RuntimeError, "the zygote is not available here");
        return NULL;
    }
    static char buf[MAX_MSG];
    for (;;) {
        union {
            char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
            struct cmsghdr align;
        } control;
        struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                             .msg_controllen = sizeof control.buf};
        ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(0); /* the worker closed its end (or is gone): nothing more to fork */
        int fds[MAX_FDS];
        int nfds = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
                if (nfds < MAX_FDS)
                    fds[nfds++] = fd;
                else
                    close(fd);
            }
        }
        long long answer;
        if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
            answer = -EMSGSIZE;
        } else {
            PyOS_BeforeFork();
            long pid = raw_clone_parent();
            if (pid == 0) {
                close(sock);
                /* Above every descriptor the child moves its pipes onto (1-4), so that no dup2 of
                   one end overwrites another that is still to be moved. */
                for (int i = 0; i < nfds; i++) {
                    int high = fcntl(fds[i], F_DUPFD_CLOEXEC, 16);
                    if (high < 0)
                        _exit(70);
                    close(fds[i]);
                    fds[i] = high;
                }
                wire_child(devnull, fds, nfds, worker, uid);
                PyOS_AfterFork_Child();
                return PyBytes_FromStringAndSize(buf, n);
            }
            int err = errno;
            PyOS_AfterFork_Parent();
            answer = pid > 0 ? (long long)pid : -(long long)err;
        }
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        ssize_t w;
        do {
            w = send(sock, &answer, sizeof answer, MSG_NOSIGNAL);
        } while (w < 0 && errno == EINTR);
        if (w != (ssize_t)sizeof answer)
            _exit(0);
    }
}

static PyMethodDef methods[] = {
    {"available", zy_available, METH_NOARGS, "Whether serve() can fork children here (glibc's tid field found)."},
    {"pair", zy_pair, METH_VARARGS,
     "pair(timeout_s): a close-on-exec SOCK_SEQPACKET socket pair (worker end, zygote end); reads on the "
     "worker's end give up after timeout_s."},
    {"send", zy_send, METH_VARARGS, "send(sock, data, fds): one message with the descriptors attached."},
    {"serve", zy_serve, METH_VARARGS,
     "serve(sock, devnull, uid): the zygote's loop; returns the message only in each forked child, wired up "
     "and switched to uid (unless uid < 0)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_zygote",
                                    "The worker's zygote: forks each evaluation's child as the worker's own.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__zygote(void)
{
    tid_offset = find_tid_offset();
    return PyModule_Create(&module);
}
