/* The optional compiled fast path of simpleperf's UDP streams (#17).
 *
 * Sending: one call writes the headers of a whole segmentation-offload batch, where Python
 * spends about a quarter of a microsecond per datagram on struct.pack_into; at unlimited
 * rate the whole send loop runs here.
 * TCP: the unpaced send loop, the plain receive loop and the reads of a receiver that
 * follows timed writes (each read's end and time, for Python to follow afterwards), the GIL
 * released for a fraction of a millisecond of writes or reads: with several streams
 * (threads of one process) every write otherwise hands the GIL over between threads.
 * Receiving: one call reads many messages (recvmmsg) with their kernel arrival stamps (a
 * UDP socket's datagrams, or a packet socket's captured TCP segments) and
 * coalesced segment sizes, and one accounts the in-order runs among them (loss, RFC 3550
 * jitter, the queue-growth blocks) the way stats.UdpReceiveAccount.feed_run does, stopping
 * at the first message that needs the Python account's rarer paths (reordering, a far jump).
 * At tens of Gbit/s Python's few microseconds per message were half a core. A UDP
 * receiver runs both in one loop for a slice at a time (#52): Python's per read and per
 * closed block were a quarter of the receiving process, and the sender's wake-ups of a
 * receiver that outran it slowed the sender.
 * Bounceback: iperf2's message echo at both ends, a round trip a loop.
 *
 * The pure-Python paths (transport/stamping.py, engine/udp_receive.py) do the same when
 * this module is not built; tests hold the two equal, bytes and accounts. Linux, standard C
 * and the CPython API only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>

static void put32(unsigned char *at, uint32_t value)
{
    at[0] = (unsigned char)(value >> 24);
    at[1] = (unsigned char)(value >> 16);
    at[2] = (unsigned char)(value >> 8);
    at[3] = (unsigned char)value;
}

static void put64(unsigned char *at, uint64_t value)
{
    put32(at, (uint32_t)(value >> 32));
    put32(at + 4, (uint32_t)value);
}

static double clock_seconds(clockid_t clock)
{
    struct timespec now;
    clock_gettime(clock, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

/* After a failed send or read: 0 to try again (a signal came), else 1 to stop, with the
 * errno to report in *error (none for the socket's send or receive timeout). */
static int stops(int *error)
{
    if (errno == EINTR)
        return 0;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
        *error = errno;
    return 1;
}

/* One read of a TCP receive loop (the GIL released): the bytes read; 0 when the loop is to
 * stop (the peer ended the stream: *ended set; a failure: its errno in *error; the socket's
 * receive timeout: neither); -1 to read again (a signal came). */
static ssize_t receive_once(int fd, void *into, size_t size, int *ended, int *error)
{
    ssize_t done = recv(fd, into, size, 0);
    if (done < 0)
        return stops(error) ? 0 : -1;
    if (done == 0)
        *ended = 1;
    return done;
}

PyDoc_STRVAR(tcp_send_doc,
"tcp_send(fd, buffer, length, limit, deadline, budget, source) -> (sent, errno)\n\n"
"Write `length` bytes of `buffer` to the TCP socket `fd` again and again (with `source` >= 0:\n"
"sendfile its first `length` bytes instead, -Z) for up to `budget` seconds, no more than\n"
"`limit` bytes in all (negative: no limit) and not past the monotonic `deadline`\n"
"(negative: none). Returns the bytes written and the errno that stopped it (0 when none;\n"
"the socket's send timeout also returns 0).");

static PyObject *tcp_send(PyObject *self, PyObject *args)
{
    int fd, source;
    Py_buffer view;
    Py_ssize_t length;
    long long limit;
    double deadline, budget;
    (void)self;
    if (!PyArg_ParseTuple(args, "iy*nLddi", &fd, &view, &length, &limit, &deadline, &budget,
                          &source))
        return NULL;
    if (length < 1 || length > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the write does not fit the buffer");
        return NULL;
    }
    long long sent = 0;
    int error = 0;
    Py_BEGIN_ALLOW_THREADS
    double end = clock_seconds(CLOCK_MONOTONIC) + budget;
    for (;;) {
        if (limit >= 0 && sent >= limit)
            break;
        double now = clock_seconds(CLOCK_MONOTONIC);
        if (now >= end || (deadline >= 0 && now >= deadline))
            break;
        size_t chunk = (size_t)length;
        if (limit >= 0 && (long long)chunk > limit - sent)
            chunk = (size_t)(limit - sent);
        ssize_t done;
        if (source >= 0) {
            off_t offset = 0;
            done = sendfile(fd, source, &offset, chunk);
        } else {
            done = send(fd, view.buf, chunk, 0);
        }
        if (done < 0) {
            if (stops(&error))
                break;
            continue;
        }
        sent += done;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("Li", sent, error);
}

#define MAX_FINISH 16

/* The last `*length` (at most `limit`) bytes of a stream in `tail`, after `count` more. */
static void keep_tail(unsigned char *tail, Py_ssize_t *length, Py_ssize_t limit,
                      const unsigned char *data, Py_ssize_t count)
{
    unsigned char joined[2 * MAX_FINISH];
    Py_ssize_t from_data = count < limit ? count : limit;
    memcpy(joined, tail, (size_t)*length);
    memcpy(joined + *length, data + count - from_data, (size_t)from_data);
    Py_ssize_t total = *length + from_data;
    *length = total < limit ? total : limit;
    memcpy(tail, joined + total - *length, (size_t)*length);
}

PyDoc_STRVAR(tcp_receive_doc,
"tcp_receive(fd, buffer, budget, finish=b'', tail=b'')\n"
"    -> (received, ended, errno, tail, last)\n\n"
"Read from the TCP socket `fd` into the writable `buffer` again and again for up to `budget`\n"
"seconds (0: one read). Returns the bytes read, whether the peer ended the stream, the errno\n"
"that stopped it (0 when none; the socket's receive timeout also returns 0), and the\n"
"stream's last len(finish) bytes (at most 16), given `tail` as those before: reading stops\n"
"after the read that makes them `finish` (the classic protocol's BYE, which the peer sends\n"
"last and then waits for our answer), and the CLOCK_MONOTONIC time of the last read that\n"
"brought data (0.0 when none did): when the data arrived, not when the loop returned.");

static PyObject *tcp_receive(PyObject *self, PyObject *args)
{
    int fd;
    Py_buffer view;
    double budget;
    const char *finish = "", *before = "";
    Py_ssize_t finish_length = 0, before_length = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*d|y#y#", &fd, &view, &budget, &finish, &finish_length,
                          &before, &before_length))
        return NULL;
    if (finish_length > MAX_FINISH || before_length > finish_length) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the finish message is too long");
        return NULL;
    }
    unsigned char tail[MAX_FINISH];
    Py_ssize_t tail_length = before_length;
    memcpy(tail, before, (size_t)before_length);
    long long received = 0;
    int ended = 0, error = 0;
    double last = 0.0, now;
    Py_BEGIN_ALLOW_THREADS
    double end = clock_seconds(CLOCK_MONOTONIC) + budget;
    do {
        ssize_t done = receive_once(fd, view.buf, (size_t)view.len, &ended, &error);
        now = clock_seconds(CLOCK_MONOTONIC);
        if (done < 0)
            continue;
        if (done == 0)
            break;
        received += done;
        last = now;
        if (finish_length) {
            keep_tail(tail, &tail_length, finish_length, view.buf, done);
            if (tail_length == finish_length && !memcmp(tail, finish, (size_t)finish_length))
                break;
        }
    } while (now < end);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("Liiy#d", received, ended, error, (const char *)tail, tail_length,
                         last);
}

PyDoc_STRVAR(tcp_receive_reads_doc,
"tcp_receive_reads(fd, buffer, budget, table, most) -> (reads, ended, errno)\n\n"
"Read from the TCP socket `fd` into the writable `buffer`, each read after the last one's\n"
"bytes, for up to `budget` seconds (0: one read), until the buffer is full or `most` reads\n"
"(at most len(table) / 24) were made. Row i of the writable `table` (struct 'qdd') gets the\n"
"buffer offset where read i ended, and its CLOCK_REALTIME and CLOCK_MONOTONIC times: a\n"
"receiver that follows timed writes times each by its own read, as a read loop in Python\n"
"would, without the GIL taken and given at every read. Returns the reads made, whether the\n"
"peer ended the stream, and the errno that stopped it (0 when none; the socket's receive\n"
"timeout also returns 0).");

struct read_row {
    int64_t end;      /* buffer offset after the read's bytes */
    double wall;      /* CLOCK_REALTIME when it returned */
    double monotonic; /* CLOCK_MONOTONIC when it returned */
};

static PyObject *tcp_receive_reads(PyObject *self, PyObject *args)
{
    int fd;
    Py_buffer view, table;
    double budget;
    Py_ssize_t most;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*dw*n", &fd, &view, &budget, &table, &most))
        return NULL;
    if (most < 1 || table.len < most * (Py_ssize_t)sizeof(struct read_row)) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&table);
        PyErr_SetString(PyExc_ValueError, "the reads do not fit the table");
        return NULL;
    }
    struct read_row *rows = (struct read_row *)table.buf;
    Py_ssize_t reads = 0, offset = 0;
    int ended = 0, error = 0;
    Py_BEGIN_ALLOW_THREADS
    double end = clock_seconds(CLOCK_MONOTONIC) + budget, now;
    do {
        ssize_t done = receive_once(fd, (char *)view.buf + offset,
                                    (size_t)(view.len - offset), &ended, &error);
        now = clock_seconds(CLOCK_MONOTONIC);
        if (done < 0)
            continue;
        if (done == 0)
            break;
        offset += done;
        rows[reads].end = offset;
        rows[reads].wall = clock_seconds(CLOCK_REALTIME);
        rows[reads].monotonic = now;
        reads++;
    } while (now < end && reads < most && offset < view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyBuffer_Release(&table);
    return Py_BuildValue("nii", reads, ended, error);
}

/* The headers of `count` datagrams of `size` bytes laid end to end from `at`. */
static void write_headers(unsigned char *at, Py_ssize_t size, Py_ssize_t count,
                          uint32_t seconds, uint32_t micros, unsigned long long first,
                          int number_bytes, const char *key, Py_ssize_t key_length)
{
    for (Py_ssize_t i = 0; i < count; i++, at += size) {
        put32(at, seconds);
        put32(at + 4, micros);
        if (number_bytes == 8)
            put64(at + 8, (uint64_t)(first + (unsigned long long)i));
        else
            put32(at + 8, (uint32_t)(first + (unsigned long long)i));
        if (key_length)
            memcpy(at + 8 + number_bytes, key, (size_t)key_length);
    }
}

/* `key` (bytes or None) as a pointer and length, and whether the headers fit: -1 with an
 * exception set when not. */
static int check_layout(PyObject *key, const char **key_bytes, Py_ssize_t *key_length,
                        int number_bytes, Py_ssize_t size, Py_ssize_t count, Py_ssize_t room)
{
    *key_bytes = NULL;
    *key_length = 0;
    if (key != Py_None
            && PyBytes_AsStringAndSize(key, (char **)key_bytes, key_length) < 0)
        return -1;
    if ((number_bytes != 4 && number_bytes != 8) || size < 8 + number_bytes + *key_length
            || count < 0 || (count > 0 && size > room / count)) {
        PyErr_SetString(PyExc_ValueError, "the datagrams do not fit the buffer");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(stamp_doc,
"stamp(buffer, size, count, seconds, micros, first, number_bytes, key)\n\n"
"Write the header of each of `count` datagrams of `size` bytes laid end to end in the\n"
"writable `buffer`: seconds and microseconds (32 bits each, big-endian), the datagram's\n"
"number from `first` (`number_bytes` 4 or 8, big-endian), then `key` (bytes, or None).");

static PyObject *stamp(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t size, count, key_length;
    unsigned long long seconds, micros, first;
    int number_bytes;
    PyObject *key;
    const char *key_bytes;
    (void)self;
    if (!PyArg_ParseTuple(args, "w*nnKKKiO", &view, &size, &count, &seconds, &micros, &first,
                          &number_bytes, &key))
        return NULL;
    if (check_layout(key, &key_bytes, &key_length, number_bytes, size, count, view.len) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    write_headers((unsigned char *)view.buf, size, count, (uint32_t)seconds, (uint32_t)micros,
                  first, number_bytes, key_bytes, key_length);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(send_batches_doc,
"send_batches(fd, buffer, size, batch, limit, first, number_bytes, key, deadline)\n"
"    -> (sent, errno)\n\n"
"Send datagrams of `size` bytes from `buffer` on the connected socket `fd` (with\n"
"UDP_SEGMENT set when `batch` > 1), `batch` per send, each send's headers written as\n"
"stamp() writes them with the wall clock's time of that send and numbers from `first`, until\n"
"`limit` datagrams are sent or the monotonic clock reaches `deadline` (negative: none).\n"
"Returns how many were sent and the errno that stopped it (0 when none; EAGAIN is the\n"
"socket's send timeout).");

static PyObject *send_batches(PyObject *self, PyObject *args)
{
    int fd, number_bytes;
    Py_buffer view;
    Py_ssize_t size, batch, limit, key_length;
    unsigned long long first;
    double deadline;
    PyObject *key;
    const char *key_bytes;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*nnnKiOd", &fd, &view, &size, &batch, &limit, &first,
                          &number_bytes, &key, &deadline))
        return NULL;
    if (batch < 1 || check_layout(key, &key_bytes, &key_length, number_bytes, size, batch,
                                  view.len) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "the datagrams do not fit the buffer");
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *at = (unsigned char *)view.buf;
    Py_ssize_t sent = 0;
    int error = 0;
    Py_BEGIN_ALLOW_THREADS
    while (sent < limit) {
        if (deadline >= 0 && clock_seconds(CLOCK_MONOTONIC) >= deadline)
            break;
        Py_ssize_t count = limit - sent < batch ? limit - sent : batch;
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        write_headers(at, size, count, (uint32_t)wall.tv_sec,
                      (uint32_t)(wall.tv_nsec / 1000), first + (unsigned long long)sent,
                      number_bytes, key_bytes, key_length);
        if (send(fd, at, (size_t)(count * size), 0) < 0) {
            error = errno;
            if (error != EINTR)
                break;
            error = 0;
            continue;
        }
        sent += count;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("ni", sent, error);
}

static uint32_t get32(const unsigned char *at)
{
    return ((uint32_t)at[0] << 24) | ((uint32_t)at[1] << 16) | ((uint32_t)at[2] << 8) | at[3];
}

static uint64_t get64(const unsigned char *at)
{
    return ((uint64_t)get32(at) << 32) | get32(at + 4);
}

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SO_RXQ_OVFL
#define SO_RXQ_OVFL 40
#endif
#define MAX_MESSAGES 64

/* One row of the table `receive` fills and `account_runs` reads: what Python unpacks with
 * struct "qqd" for the messages it accounts itself. */
struct row {
    int64_t length;   /* bytes read */
    int64_t segment;  /* bytes of each datagram in it (UDP_GRO), else length */
    double arrival;   /* the kernel's arrival stamp, seconds on the wall clock */
    int64_t drops;    /* the socket's drops when it queued this one (SO_RXQ_OVFL), else 0 */
};

union control {
    /* room for SO_TIMESTAMPING's three stamps (the largest stamp), UDP_GRO and SO_RXQ_OVFL */
    char space[CMSG_SPACE(3 * sizeof(struct timespec)) + CMSG_SPACE(sizeof(int))
               + CMSG_SPACE(sizeof(uint32_t))];
    struct cmsghdr align;
};

PyDoc_STRVAR(receive_doc,
"receive(fd, buffer, slot, count, table, fill=True) -> int\n\n"
"Read up to `count` messages (at most 64) from the datagram socket `fd` in one recvmmsg,\n"
"the i-th into buffer[i * slot:(i + 1) * slot], blocking until the first (or the socket's\n"
"receive timeout: then 0). Row i of the writable `table` (32 bytes each, struct 'qqdq')\n"
"gets its length, its datagrams' size, its arrival time and the socket's count of drops\n"
"when it queued it (SO_RXQ_OVFL, else 0). The arrival is the kernel's stamp\n"
"(SO_TIMESTAMPNS, or SO_TIMESTAMPING's software stamp); a message the kernel did not stamp\n"
"gets the time of the read with `fill`, else NaN. Returns how many were read.");

/* Room for up to MAX_MESSAGES messages of one recvmmsg: the headers, vectors and ancillary
 * space, set up once for a buffer of `count` slots of `slot` bytes. */
struct messages {
    struct mmsghdr headers[MAX_MESSAGES];
    struct iovec vectors[MAX_MESSAGES];
    union control controls[MAX_MESSAGES];
};

static void prepare_messages(struct messages *m, unsigned char *buffer, Py_ssize_t slot,
                             Py_ssize_t count)
{
    memset(m->headers, 0, sizeof(m->headers[0]) * (size_t)count);
    for (Py_ssize_t i = 0; i < count; i++) {
        m->vectors[i].iov_base = buffer + i * slot;
        m->vectors[i].iov_len = (size_t)slot;
        m->headers[i].msg_hdr.msg_iov = &m->vectors[i];
        m->headers[i].msg_hdr.msg_iovlen = 1;
    }
}

/* One recvmmsg into the prepared messages (the GIL released by the caller), each message's
 * row filled: the count read, or -1 with the errno in *error (EAGAIN: the socket's receive
 * timeout, or with `at_once` nothing to read). It waits for the first message unless
 * `at_once`. */
static int read_messages(int fd, struct messages *m, Py_ssize_t count, struct row *rows,
                         int fill, int at_once, int *error)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        m->headers[i].msg_hdr.msg_control = m->controls[i].space;
        m->headers[i].msg_hdr.msg_controllen = sizeof(m->controls[i].space);
    }
    int got = recvmmsg(fd, m->headers, (unsigned int)count,
                       MSG_WAITFORONE | (at_once ? MSG_DONTWAIT : 0), NULL);
    if (got < 0) {
        *error = errno;
        return -1;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int i = 0; i < got; i++) {
        struct msghdr *header = &m->headers[i].msg_hdr;
        int64_t length = m->headers[i].msg_len, segment = length, drops = 0;
        double arrival = -1.0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(header); c; c = CMSG_NXTHDR(header, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS) {
                struct timespec stamp;
                memcpy(&stamp, CMSG_DATA(c), sizeof(stamp));
                arrival = (double)stamp.tv_sec + (double)stamp.tv_nsec * 1e-9;
            } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPING) {
                /* three stamps, the software one first; the kernel sends the message only
                   when one of them is set, and a zero one is not */
                struct timespec stamp;
                memcpy(&stamp, CMSG_DATA(c), sizeof(stamp));
                if (stamp.tv_sec != 0 || stamp.tv_nsec != 0)
                    arrival = (double)stamp.tv_sec + (double)stamp.tv_nsec * 1e-9;
            } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
                int size;
                memcpy(&size, CMSG_DATA(c), sizeof(size));
                if (size > 0)
                    segment = size;
            } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
                uint32_t dropped;
                memcpy(&dropped, CMSG_DATA(c), sizeof(dropped));
                drops = dropped;
            }
        }
        if (arrival < 0)
            arrival = fill ? (double)now.tv_sec + (double)now.tv_nsec * 1e-9 : NAN;
        rows[i].length = length;
        rows[i].segment = segment;
        rows[i].arrival = arrival;
        rows[i].drops = drops;
    }
    return got;
}

static PyObject *receive(PyObject *self, PyObject *args)
{
    (void)self;
    int fd;
    Py_buffer data, table;
    Py_ssize_t slot, count;
    int fill = 1;
    if (!PyArg_ParseTuple(args, "iw*nnw*|p", &fd, &data, &slot, &count, &table, &fill))
        return NULL;
    PyObject *result = NULL;
    if (count < 1 || count > MAX_MESSAGES || slot < 1 || slot > data.len / count
            || table.len < count * (Py_ssize_t)sizeof(struct row)) {
        PyErr_SetString(PyExc_ValueError, "the messages do not fit the buffers");
        goto done;
    }
    struct messages m;
    prepare_messages(&m, (unsigned char *)data.buf, slot, count);
    int got, error = 0;
    Py_BEGIN_ALLOW_THREADS
    got = read_messages(fd, &m, count, (struct row *)table.buf, fill, 0, &error);
    Py_END_ALLOW_THREADS
    if (got < 0) {
        if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR) {
            if (error == EINTR && PyErr_CheckSignals() < 0)
                goto done;
            result = PyLong_FromLong(0);
            goto done;
        }
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = PyLong_FromLong(got);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&table);
    return result;
}

/* The account's state as stats.UdpReceiveAccount keeps it (its run_state()). */
struct account {
    long long highest, lost, block_count, received;
    double jitter, transit, block_min;
    int has_transit;
};

/* Queue-growth blocks closed while accounting, (least transit, arrival) pairs in C's
 * memory, so that accounting needs no Python object and no GIL. */
struct closed {
    double *pairs;
    Py_ssize_t count, capacity;
    double prune_after;  /* stats.QueueGrowth.prune_after() */
};

/* Highest packet numbers this path takes: beyond, Python's unbounded integers do. */
#define MAX_NUMBER (1LL << 62)

/* stats.UdpReceiveAccount.feed_run, operation for operation (the same doubles result):
 * `count` packets numbered from `first`, sent from `sent` to `last_sent` evenly, arriving
 * together. The caller leaves room in `closed` for count / block + 1 more blocks. */
static void feed_run(struct account *a, long long first, long long count, double sent,
                     double last_sent, double arrival, long long block, struct closed *closed)
{
    double step = count < 2 ? 0.0 : (last_sent - sent) / (double)(count - 1);
    a->lost += first - a->highest - 1;
    a->highest = first + count - 1;
    double now_transit = arrival - sent;
    if (a->has_transit)
        a->jitter += (fabs(now_transit - a->transit) - a->jitter) / 16.0;
    a->jitter = step + (a->jitter - step) * pow(15.0 / 16.0, (double)(count - 1));
    a->transit = arrival - (sent + (double)(count - 1) * step);
    a->has_transit = 1;
    long long remaining = count, done = 0;
    while (remaining) {
        long long take = block - a->block_count < remaining ? block - a->block_count : remaining;
        double least = now_transit - (double)(done + take - 1) * step;
        if (least < a->block_min)
            a->block_min = least;
        a->block_count += take;
        remaining -= take;
        done += take;
        if (a->block_count == block) {
            /* a block at or below one before it, arriving no earlier, makes that one useless
               to the window's least (stats.QueueGrowth.close) */
            while (arrival > closed->prune_after && closed->count > 0
                   && closed->pairs[2 * closed->count - 2] >= a->block_min
                   && closed->pairs[2 * closed->count - 1] > closed->prune_after
                   && closed->pairs[2 * closed->count - 1] <= arrival)
                closed->count--;
            closed->pairs[2 * closed->count] = a->block_min;
            closed->pairs[2 * closed->count + 1] = arrival;
            closed->count++;
            a->block_min = INFINITY;
            a->block_count = 0;
        }
    }
    a->received += count;
}

#define IPERF2_LAYOUT (-8)

/* A datagram's number and send time in the header layout `layout` (account_runs'). */
static uint64_t number_at(const unsigned char *at, int layout)
{
    if (layout == IPERF2_LAYOUT)
        return ((uint64_t)get32(at + 12) << 32) | get32(at);
    return layout == 8 ? get64(at + 8) : get32(at + 8);
}

static double sent_at(const unsigned char *at, int layout)
{
    const unsigned char *time = layout == IPERF2_LAYOUT ? at + 4 : at;
    return (double)get32(time) + (double)get32(time + 4) * 1e-6;
}

/* How the runs of one message are read: the header and the account's limits. */
struct runs {
    Py_ssize_t slot, header_size;
    int layout;
    long long block, jump_limit;
};

/* Account one message (`row`, its bytes at `base`) if it is one datagram or a coalesced
 * run numbered in order, after the highest number seen and no further than the jump
 * limit beyond it, and `closed` has room for the blocks it may close: 1 and its bytes
 * added to *bytes (a message shorter than a header is passed over, as the Python path
 * does), else 0 with nothing changed (the caller's Python path takes it). */
static int account_message(struct account *a, const struct row *row,
                           const unsigned char *base, const struct runs *r,
                           struct closed *closed, long long *bytes)
{
    if (row->length < r->header_size)
        return 1;
    if (row->length > r->slot || row->segment < 1)
        return 0;
    long long run = 1;
    const unsigned char *last = base;
    if (row->segment < row->length) {
        run = (row->length - r->header_size) / row->segment + 1;
        last = base + (run - 1) * row->segment;
    }
    if (closed->capacity - closed->count < run / r->block + 1)
        return 0;
    uint64_t first = number_at(base, r->layout);
    uint64_t final = number_at(last, r->layout);
    if (first >= (uint64_t)MAX_NUMBER || final != first + (uint64_t)(run - 1)
            || (long long)first <= a->highest
            || (long long)first - a->highest > r->jump_limit)
        return 0;
    double sent = sent_at(base, r->layout);
    double last_sent = sent_at(last, r->layout);
    if (run >= 2 && last_sent < sent)
        return 0;
    feed_run(a, (long long)first, run, sent, last_sent, row->arrival, r->block, closed);
    *bytes += row->length;
    return 1;
}

/* The state tuple of stats.UdpReceiveAccount.run_state(), in and out. */
#define STATE_FORMAT "(LLdOdLL)"

static int take_state(struct account *a, PyObject *transit)
{
    a->has_transit = transit != Py_None;
    a->transit = a->has_transit ? PyFloat_AsDouble(transit) : 0.0;
    return a->has_transit && PyErr_Occurred() ? -1 : 0;
}

static PyObject *give_state(const struct account *a)
{
    PyObject *transit = a->has_transit ? PyFloat_FromDouble(a->transit) : Py_NewRef(Py_None);
    if (transit == NULL)
        return NULL;
    return Py_BuildValue("(LLdNdLL)", a->highest, a->lost, a->jitter, transit, a->block_min,
                         a->block_count, a->received);
}

static int runs_valid(const struct runs *r)
{
    int number_bytes = r->layout < 0 ? -r->layout : r->layout;
    return (r->layout == 4 || r->layout == 8 || r->layout == IPERF2_LAYOUT)
        && r->header_size >= 8 + number_bytes && r->slot >= 1 && r->block >= 1;
}

PyDoc_STRVAR(account_runs_doc,
"account_runs(state, buffer, slot, table, start, got, header_size, number_bytes, block,\n"
"             jump_limit, prune_after=inf) -> (state, index, bytes, blocks)\n\n"
"number_bytes: 4 or 8, a header of send time (seconds, microseconds) then the number; or\n"
"IPERF2_LAYOUT (-8): iperf2's, the number's low word, the send time, its high word.\n"
"Account messages start..got-1 of a `receive` (their rows in `table`, their bytes at\n"
"i * slot of `buffer`) while each is one datagram or a coalesced run numbered in order, after\n"
"the highest number seen and no further than `jump_limit` beyond it: the state (highest,\n"
"lost, jitter, transit or None, block_min, block_count, received) as\n"
"stats.UdpReceiveAccount.feed_run leaves it. Returns the new state, the index of the first\n"
"message left to the caller (got when none), the bytes of the messages accounted and the\n"
"queue-growth blocks closed, as (least transit, arrival; one arriving after `prune_after`\n"
"is left out when a later one, arriving no earlier, is at or below it). Messages shorter\n"
"than a header are passed over, as the Python path does.");

static PyObject *account_runs(PyObject *self, PyObject *args)
{
    (void)self;
    struct account a;
    struct runs r;
    PyObject *transit;
    Py_buffer data, table;
    Py_ssize_t start, got;
    double prune_after = INFINITY;
    if (!PyArg_ParseTuple(args, STATE_FORMAT "y*ny*nnniLL|d", &a.highest, &a.lost, &a.jitter,
                          &transit, &a.block_min, &a.block_count, &a.received, &data, &r.slot,
                          &table, &start, &got, &r.header_size, &r.layout, &r.block,
                          &r.jump_limit, &prune_after))
        return NULL;
    PyObject *result = NULL, *blocks = NULL, *state = NULL;
    struct closed closed = {NULL, 0, 0, prune_after};
    if (take_state(&a, transit) < 0)
        goto done;
    if (!runs_valid(&r) || start < 0 || got < start
            || (got > 0 && (r.slot > data.len / got
                            || table.len < got * (Py_ssize_t)sizeof(struct row)))) {
        PyErr_SetString(PyExc_ValueError, "the messages do not fit the buffers");
        goto done;
    }
    /* every message can close at most its datagrams / block + 1 blocks */
    closed.capacity = (got - start) * (r.slot / r.header_size / r.block + 1) + 1;
    closed.pairs = PyMem_Malloc(sizeof(double) * 2 * (size_t)closed.capacity);
    if (closed.pairs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const struct row *rows = (const struct row *)table.buf;
    long long bytes = 0;
    Py_ssize_t index = start;
    while (index < got && account_message(&a, &rows[index],
                                          (const unsigned char *)data.buf + index * r.slot,
                                          &r, &closed, &bytes))
        index++;
    blocks = PyList_New(closed.count);
    if (blocks == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < closed.count; i++) {
        PyObject *pair = Py_BuildValue("(dd)", closed.pairs[2 * i], closed.pairs[2 * i + 1]);
        if (pair == NULL)
            goto done;
        PyList_SET_ITEM(blocks, i, pair);
    }
    state = give_state(&a);
    if (state != NULL)
        result = Py_BuildValue("OnLO", state, index, bytes, blocks);
done:
    Py_XDECREF(state);
    Py_XDECREF(blocks);
    PyMem_Free(closed.pairs);
    PyBuffer_Release(&data);
    PyBuffer_Release(&table);
    return result;
}

PyDoc_STRVAR(receive_runs_doc,
"receive_runs(fd, buffer, slot, count, table, state, header_size, number_bytes, block,\n"
"             jump_limit, drops, blocks, prune_after, seconds, rest, rest_budget,\n"
"             rest_messages)\n"
"    -> (state, got, index, bytes, closed)\n\n"
"receive() and account_runs() in one loop with the GIL released, for up to `seconds`:\n"
"read up to `count` messages at a time and account each that account_runs() would, until\n"
"one it would not (or one the socket queued after dropping more than `drops`, or one whose\n"
"blocks would overflow the writable `blocks`, 16 bytes each). Then, or when `seconds` ran\n"
"out, or a read found nothing (got 0: only the first read of a call waits, up to the\n"
"socket's receive timeout), it returns: the state, the rows of the last read (`got`,\n"
"in `table` and `buffer` as receive() leaves them) and the first of them left to the caller\n"
"(`index`; got when none), the bytes accounted and the blocks closed (in `blocks` as pairs\n"
"of doubles: least transit, arrival; one arriving after `prune_after` is left out when a\n"
"later one, arriving no earlier, is at or below it).\n\n"
"After a read that emptied the socket (fewer than `count`) it waits on the socket again,\n"
"unless at the rate the messages just came at least `rest_messages` would arrive within\n"
"`rest` seconds: then it sleeps that long, or less if the socket would fill `rest_budget`\n"
"bytes meanwhile, so that the sender's next datagram need not wake it (rest 0: never).");

static PyObject *receive_runs(PyObject *self, PyObject *args)
{
    (void)self;
    int fd;
    struct account a;
    struct runs r;
    PyObject *transit;
    Py_buffer data, table, blocks;
    Py_ssize_t count;
    long long drops;
    double prune_after, seconds, rest, rest_budget;
    int rest_messages;
    if (!PyArg_ParseTuple(args, "iw*nnw*" STATE_FORMAT "niLLLw*ddddi", &fd, &data, &r.slot,
                          &count, &table, &a.highest, &a.lost, &a.jitter, &transit,
                          &a.block_min, &a.block_count, &a.received, &r.header_size,
                          &r.layout, &r.block, &r.jump_limit, &drops, &blocks, &prune_after,
                          &seconds, &rest, &rest_budget, &rest_messages))
        return NULL;
    PyObject *result = NULL, *state = NULL;
    if (take_state(&a, transit) < 0)
        goto done;
    if (!runs_valid(&r) || count < 1 || count > MAX_MESSAGES || r.slot > data.len / count
            || table.len < count * (Py_ssize_t)sizeof(struct row)
            || blocks.len < (Py_ssize_t)(2 * sizeof(double))) {
        PyErr_SetString(PyExc_ValueError, "the messages do not fit the buffers");
        goto done;
    }
    struct messages m;
    prepare_messages(&m, (unsigned char *)data.buf, r.slot, count);
    struct row *rows = (struct row *)table.buf;
    struct closed closed = {(double *)blocks.buf, 0,
                            blocks.len / (Py_ssize_t)(2 * sizeof(double)), prune_after};
    long long bytes = 0;
    int got = 0, error = 0;
    Py_ssize_t index = 0;
    Py_BEGIN_ALLOW_THREADS
    double began = clock_seconds(CLOCK_MONOTONIC), since = began;
    for (;;) {
        /* only the first read waits: what was accounted is never held back meanwhile */
        got = read_messages(fd, &m, count, rows, 1, bytes > 0, &error);
        if (got < 0) {
            got = 0;
            index = 0;
            break;
        }
        long long before = bytes;
        for (index = 0; index < got; index++) {
            if (rows[index].drops > drops
                    || !account_message(&a, &rows[index],
                                        (const unsigned char *)data.buf + index * r.slot,
                                        &r, &closed, &bytes))
                break;
        }
        if (index < got || got == 0)
            break;
        double now = clock_seconds(CLOCK_MONOTONIC);
        if (now - began >= seconds)
            break;
        long long moved = bytes - before;
        if (got < count && rest > 0 && moved > 0 && now > since
                && (double)got * rest >= (double)rest_messages * (now - since)) {
            double pause = rest_budget * (now - since) / (double)moved;
            if (pause > rest)
                pause = rest;
            struct timespec wait = {0, (long)(pause * 1e9)};
            nanosleep(&wait, NULL);
            now = clock_seconds(CLOCK_MONOTONIC);
        }
        since = now;
    }
    Py_END_ALLOW_THREADS
    if (error && error != EAGAIN && error != EWOULDBLOCK && error != EINTR) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    if (error == EINTR && PyErr_CheckSignals() < 0)
        goto done;
    state = give_state(&a);
    if (state != NULL)
        result = Py_BuildValue("OinLn", state, got, index, bytes, closed.count);
done:
    Py_XDECREF(state);
    PyBuffer_Release(&data);
    PyBuffer_Release(&table);
    PyBuffer_Release(&blocks);
    return result;
}


/* iperf2's bounceback (--bounceback), both ends: Python's round per message (a read, a
 * stamp, a write, each a call) was the limit on a loopback's round trips a second. The
 * message's layout comes from Python (protocol/iperf2.py): the offsets of the stop flag,
 * the server's times and the client's number and send time. */

enum { BOUNCE_BUDGET = 0, BOUNCE_ENDED = 1, BOUNCE_STOPPED = 2, BOUNCE_PARTIAL = 3,
       BOUNCE_QUIET = 4, BOUNCE_FAILED = 5, BOUNCE_WRONG = 6 };

static void put_time(unsigned char *at, double seconds)
{
    long long whole = (long long)seconds;
    put32(at, (uint32_t)whole);
    put32(at + 4, (uint32_t)((seconds - (double)whole) * 1e6));
}

/* The next `size`-byte message into `buffer` (from `*got` bytes in): BOUNCE_BUDGET when
 * whole, else why not (its errno in *error for BOUNCE_FAILED). */
static int read_whole(int fd, unsigned char *buffer, size_t size, size_t *got, int *error)
{
    while (*got < size) {
        ssize_t done = recv(fd, buffer + *got, size - *got, 0);
        if (done > 0) {
            *got += (size_t)done;
            continue;
        }
        if (done == 0)
            return *got ? BOUNCE_PARTIAL : BOUNCE_ENDED;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return *got ? BOUNCE_PARTIAL : BOUNCE_QUIET;
        *error = errno;
        return BOUNCE_FAILED;
    }
    return BOUNCE_BUDGET;
}

static int send_whole(int fd, const unsigned char *buffer, size_t size, int *error)
{
    size_t sent = 0;
    while (sent < size) {
        ssize_t done = send(fd, buffer + sent, size - sent, MSG_NOSIGNAL);
        if (done > 0) {
            sent += (size_t)done;
            continue;
        }
        if (done < 0 && errno == EINTR)
            continue;
        *error = done < 0 ? errno : EPIPE;  /* the socket's send timeout too: as sendall */
        return BOUNCE_FAILED;
    }
    return BOUNCE_BUDGET;
}

/* iperf2's bounceback asks both ends to acknowledge at once (TCP_QUICKACK, which the
 * kernel clears again on its own): set before every read, as iperf 2.1.8 does. */
static void quick_ack(int fd, int quickack)
{
    if (quickack) {
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
    }
}

PyDoc_STRVAR(bounce_echo_doc,
"bounce_echo(fd, buffer, size, stop_at, stop_mask, times_at, budget, quickack)\n"
"    -> (count, got, read_at, status, errno)\n\n"
"The server's end: read each `size`-byte message into `buffer`, stamp its read and write\n"
"times (wall clock, seconds and microseconds) at `times_at` and write it back, for up to\n"
"`budget` seconds. Stops after a message whose byte `stop_at` has `stop_mask` (the\n"
"client's last: not written back), at the peer's end between messages, when the socket's\n"
"receive timeout passes with nothing read (QUIET) or part of a message (PARTIAL: `got`\n"
"bytes of it in `buffer`), or on a failure. `count`: messages read; `read_at`: the last\n"
"one's read time; `quickack`: TCP_QUICKACK before every read. Statuses: 0 budget,\n"
"1 ended, 2 stopped, 3 partial, 4 quiet, 5 failed.");

static PyObject *bounce_echo(PyObject *self, PyObject *args)
{
    int fd, stop_mask, quickack, error = 0, status = BOUNCE_BUDGET;
    Py_buffer view;
    Py_ssize_t size, stop_at, times_at;
    double budget, read_at = 0.0;
    long long count = 0;
    size_t got = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*nnindp", &fd, &view, &size, &stop_at, &stop_mask,
                          &times_at, &budget, &quickack))
        return NULL;
    if (size < 1 || size > view.len || stop_at >= size || times_at + 16 > size) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the message does not fit the buffer");
        return NULL;
    }
    unsigned char *buffer = view.buf;
    Py_BEGIN_ALLOW_THREADS
    double end = clock_seconds(CLOCK_MONOTONIC) + budget;
    for (;;) {
        got = 0;
        quick_ack(fd, quickack);
        status = read_whole(fd, buffer, (size_t)size, &got, &error);
        if (status != BOUNCE_BUDGET)
            break;
        read_at = clock_seconds(CLOCK_REALTIME);
        count++;
        if (buffer[stop_at] & stop_mask) {
            status = BOUNCE_STOPPED;
            break;
        }
        put_time(buffer + times_at, read_at);
        put_time(buffer + times_at + 8, clock_seconds(CLOCK_REALTIME));
        status = send_whole(fd, buffer, (size_t)size, &error);
        if (status != BOUNCE_BUDGET || clock_seconds(CLOCK_MONOTONIC) >= end)
            break;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("Lndii", count, (Py_ssize_t)got, read_at, status, error);
}

PyDoc_STRVAR(bounce_send_doc,
"bounce_send(fd, message, reply, size, number, number_at, sent_at, times_at, deadline,\n"
"            results, quickack) -> (count, status, errno, got, began)\n\n"
"The client's end, back to back: write `message` (renumbered from `number` + 1 at\n"
"`number_at`, its send time, wall clock, at `sent_at`) and read its `size`-byte answer\n"
"into `reply`, until the monotonic `deadline` or `results` (doubles, two a message: the\n"
"round trip and the server's hold, ms, from the times at `times_at`) is full. An answer\n"
"whose first four bytes are not the message's stops it (6, wrong); a socket's receive\n"
"timeout with the answer not whole is 4 (quiet) or 3 (partial: `got` bytes of it in\n"
"`reply`; `began`, the monotonic time its message went), the peer's end 1. `quickack`:\n"
"TCP_QUICKACK before every read.");

static double time_at(const unsigned char *at)
{
    return (double)get32(at) + (double)get32(at + 4) * 1e-6;
}

static PyObject *bounce_send(PyObject *self, PyObject *args)
{
    int fd, quickack, error = 0, status = BOUNCE_BUDGET;
    Py_buffer message, reply, results;
    Py_ssize_t size, number_at, sent_at, times_at;
    long long number, count = 0;
    double deadline, began = 0.0;
    size_t got = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*w*nLnnndw*p", &fd, &message, &reply, &size, &number,
                          &number_at, &sent_at, &times_at, &deadline, &results, &quickack))
        return NULL;
    if (size < 1 || size > message.len || size > reply.len || number_at + 4 > size
            || sent_at + 8 > size || times_at + 16 > size) {
        PyBuffer_Release(&message);
        PyBuffer_Release(&reply);
        PyBuffer_Release(&results);
        PyErr_SetString(PyExc_ValueError, "the message does not fit the buffers");
        return NULL;
    }
    unsigned char *out = message.buf, *in = reply.buf;
    double *rows = results.buf;
    long long capacity = (long long)(results.len / (Py_ssize_t)(2 * sizeof(double)));
    Py_BEGIN_ALLOW_THREADS
    while (count < capacity && clock_seconds(CLOCK_MONOTONIC) < deadline) {
        put32(out + number_at, (uint32_t)(number + count + 1));
        put_time(out + sent_at, clock_seconds(CLOCK_REALTIME));
        began = clock_seconds(CLOCK_MONOTONIC);
        status = send_whole(fd, out, (size_t)size, &error);
        if (status != BOUNCE_BUDGET)
            break;
        got = 0;
        quick_ack(fd, quickack);
        status = read_whole(fd, in, (size_t)size, &got, &error);
        if (status != BOUNCE_BUDGET)
            break;
        if (memcmp(in, out, 4) != 0) {
            status = BOUNCE_WRONG;
            break;
        }
        double held = time_at(in + times_at + 8) - time_at(in + times_at);
        rows[2 * count] = (clock_seconds(CLOCK_MONOTONIC) - began) * 1000.0;
        rows[2 * count + 1] = held > 0 ? held * 1000.0 : 0.0;
        count++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&message);
    PyBuffer_Release(&reply);
    PyBuffer_Release(&results);
    return Py_BuildValue("Liind", count, status, error, (Py_ssize_t)got, began);
}

static PyMethodDef methods[] = {
    {"stamp", stamp, METH_VARARGS, stamp_doc},
    {"send_batches", send_batches, METH_VARARGS, send_batches_doc},
    {"tcp_send", tcp_send, METH_VARARGS, tcp_send_doc},
    {"tcp_receive", tcp_receive, METH_VARARGS, tcp_receive_doc},
    {"tcp_receive_reads", tcp_receive_reads, METH_VARARGS, tcp_receive_reads_doc},
    {"receive", receive, METH_VARARGS, receive_doc},
    {"account_runs", account_runs, METH_VARARGS, account_runs_doc},
    {"receive_runs", receive_runs, METH_VARARGS, receive_runs_doc},
    {"bounce_echo", bounce_echo, METH_VARARGS, bounce_echo_doc},
    {"bounce_send", bounce_send, METH_VARARGS, bounce_send_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "simpleperf._fastpath",
    "The optional compiled fast path of the streams' hot loops.", -1, methods,
};

PyMODINIT_FUNC PyInit__fastpath(void)
{
    return PyModule_Create(&module);
}
