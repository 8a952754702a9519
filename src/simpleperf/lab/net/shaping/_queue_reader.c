/* The optional compiled reader of the own shaper's delay line (delayline.py).
 *
 * The kernel sends one netlink message per queued packet, and a read of a netlink socket
 * returns one message: in Python every packet cost a system call and a parse of its
 * attributes. Here one recvmmsg takes up to 64 messages and C decodes them, giving Python
 * what nfqueue.packets gives it: (packet id, kernel arrival stamp or None, length, first
 * bytes). It matters where
 * packets reach the delay line one by one (a direction with loss: 1.23 x the goodput of a
 * 1 Gbit/s link with 10 ms delay), not where aggregates do.
 *
 * The pure-Python path (nfqueue.packets over one recv at a time) runs where this module is
 * not built or SIMPLEPERF_PURE_PYTHON=1; tests hold the two decoders equal over any bytes
 * and have both read every packet of a real queue.
 * Linux, standard C and the CPython API only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#define MAX_MESSAGES 64
/* Each call returns at most this many packets, so a flooded queue cannot hold the delay
 * line in one call past its next release. */
#define MAX_PACKETS 4096
#define NLMSG_HEADER 16
#define NFGENMSG_HEADER 4
#define PACKET_MESSAGE ((3 << 8) | 0) /* NFNL_SUBSYS_QUEUE, NFQNL_MSG_PACKET */
#define NFQA_PACKET_HDR 1
#define NFQA_TIMESTAMP 4
#define NFQA_PAYLOAD 10
#define NFQA_CAP_LEN 13

static uint32_t host32(const unsigned char *at)
{
    uint32_t value;
    memcpy(&value, at, sizeof(value));
    return value;
}

static uint16_t host16(const unsigned char *at)
{
    uint16_t value;
    memcpy(&value, at, sizeof(value));
    return value;
}

static uint64_t big_endian(const unsigned char *at, int bytes)
{
    uint64_t value = 0;
    for (int i = 0; i < bytes; i++)
        value = (value << 8) | at[i];
    return value;
}

/* Appends (id, stamp or None, length, first bytes) for one packet message's attributes;
 * 0, or -1 on an error set in Python. A message without an id is passed over, as
 * nfqueue._decode_packet does; the length is the payload's unless the kernel gave it. */
static int decode_packet(const unsigned char *at, size_t length, PyObject *found)
{
    size_t offset = 0;
    int has_id = 0;
    uint32_t packet_id = 0;
    double stamp = 0.0;
    int stamped = 0;
    const unsigned char *payload = NULL;
    size_t payload_size = 0;
    long long full_length = -1;
    while (offset + 4 <= length) {
        size_t size = host16(at + offset);
        unsigned kind = host16(at + offset + 2) & 0x3FFF;
        if (size < 4 || offset + size > length)
            break;
        if (kind == NFQA_PACKET_HDR && size >= 8) {
            packet_id = (uint32_t)big_endian(at + offset + 4, 4);
            has_id = 1;
        } else if (kind == NFQA_TIMESTAMP && size >= 20) {
            /* As Python computes seconds + micros / 1e6, so both paths give equal floats. */
            stamp = (double)big_endian(at + offset + 4, 8)
                    + (double)big_endian(at + offset + 12, 8) / 1e6;
            stamped = 1;
        } else if (kind == NFQA_PAYLOAD) {
            payload = at + offset + 4;
            payload_size = size - 4;
        } else if (kind == NFQA_CAP_LEN && size >= 8) {
            full_length = (long long)big_endian(at + offset + 4, 4);
        }
        offset += (size + 3) & ~(size_t)3;
    }
    if (!has_id)
        return 0;
    long long packet_length = full_length >= 0 ? full_length : (long long)payload_size;
    const char *bytes = payload != NULL ? (const char *)payload : "";
    PyObject *row = stamped
        ? Py_BuildValue("(kdLy#)", (unsigned long)packet_id, stamp, packet_length, bytes,
                        (Py_ssize_t)payload_size)
        : Py_BuildValue("(kOLy#)", (unsigned long)packet_id, Py_None, packet_length, bytes,
                        (Py_ssize_t)payload_size);
    if (row == NULL)
        return -1;
    int failed = PyList_Append(found, row);
    Py_DECREF(row);
    return failed;
}

/* Every packet message in one datagram, as nfqueue.packets walks it. */
static int decode_datagram(const unsigned char *at, size_t end, PyObject *found)
{
    size_t offset = 0;
    while (offset + NLMSG_HEADER <= end) {
        size_t length = host32(at + offset);
        unsigned kind = host16(at + offset + 4);
        if (length < NLMSG_HEADER || offset + length > end)
            break;
        if (kind == PACKET_MESSAGE && length >= NLMSG_HEADER + NFGENMSG_HEADER
                && decode_packet(at + offset + NLMSG_HEADER + NFGENMSG_HEADER,
                                 length - NLMSG_HEADER - NFGENMSG_HEADER, found) < 0)
            return -1;
        offset += (length + 3) & ~(size_t)3;
    }
    return 0;
}

PyDoc_STRVAR(drain_doc,
"drain(fd, buffer, slot) -> (packets, drained)\n\n"
"Read the queue socket `fd` without blocking, up to MAX_MESSAGES per recvmmsg, message i\n"
"of a call into buffer[i * slot:(i + 1) * slot]. `packets`: (packet id, kernel arrival\n"
"stamp in seconds since the epoch or None, length, first bytes) of each queued-packet\n"
"message, in order;\n"
"`drained`: the socket had nothing more (False when the call stopped at its limit of\n"
"packets). Lost notifications (ENOBUFS) are read past, as the pure-Python path does.");

static PyObject *drain(PyObject *self, PyObject *args)
{
    (void)self;
    int fd;
    Py_buffer data;
    Py_ssize_t slot;
    if (!PyArg_ParseTuple(args, "iw*n", &fd, &data, &slot))
        return NULL;
    PyObject *found = NULL, *result = NULL;
    if (slot < NLMSG_HEADER || data.len / slot < 1) {
        PyErr_SetString(PyExc_ValueError, "the buffer holds no message of that slot");
        goto done;
    }
    Py_ssize_t count = data.len / slot;
    if (count > MAX_MESSAGES)
        count = MAX_MESSAGES;
    found = PyList_New(0);
    if (found == NULL)
        goto done;
    struct mmsghdr messages[MAX_MESSAGES];
    struct iovec vectors[MAX_MESSAGES];
    int drained = 0;
    while (!drained && PyList_GET_SIZE(found) < MAX_PACKETS) {
        memset(messages, 0, sizeof(messages[0]) * (size_t)count);
        for (Py_ssize_t i = 0; i < count; i++) {
            vectors[i].iov_base = (char *)data.buf + i * slot;
            vectors[i].iov_len = (size_t)slot;
            messages[i].msg_hdr.msg_iov = &vectors[i];
            messages[i].msg_hdr.msg_iovlen = 1;
        }
        int got = recvmmsg(fd, messages, (unsigned int)count, MSG_DONTWAIT, NULL);
        if (got < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                drained = 1;
                break;
            }
            if (errno == ENOBUFS)
                continue;
            if (errno == EINTR) {
                if (PyErr_CheckSignals() < 0)
                    goto done;
                continue;
            }
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
        for (int i = 0; i < got; i++) {
            if (decode_datagram((const unsigned char *)vectors[i].iov_base,
                                messages[i].msg_len, found) < 0)
                goto done;
        }
        /* A short batch emptied the socket: no call to learn it again. */
        drained = got < count;
    }
    result = Py_BuildValue("(OO)", found, drained ? Py_True : Py_False);
done:
    Py_XDECREF(found);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"drain", drain, METH_VARARGS, drain_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "simpleperf.lab.net.shaping._queue_reader",
    "The optional compiled reader of the delay line's queue sockets.", -1, methods,
};

PyMODINIT_FUNC PyInit__queue_reader(void)
{
    PyObject *made = PyModule_Create(&module);
    if (made != NULL && (PyModule_AddIntConstant(made, "MAX_MESSAGES", MAX_MESSAGES) < 0
                         || PyModule_AddIntConstant(made, "MAX_PACKETS", MAX_PACKETS) < 0)) {
        Py_DECREF(made);
        return NULL;
    }
    return made;
}
