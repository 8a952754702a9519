/* The optional compiled fast path of simpleperf's UDP sender (#17): one call writes the
 * headers of a whole segmentation-offload batch, where Python spends about a quarter of a
 * microsecond per datagram on struct.pack_into. The pure-Python path in
 * engine/udp_stream.py does the same when this module is not built; tests hold the two
 * byte for byte equal. Standard C and the CPython API only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

PyDoc_STRVAR(stamp_doc,
"stamp(buffer, size, count, seconds, micros, first, number_bytes, key)\n\n"
"Write the header of each of `count` datagrams of `size` bytes laid end to end in the\n"
"writable `buffer`: seconds and microseconds (32 bits each, big-endian), the datagram's\n"
"number from `first` (`number_bytes` 4 or 8, big-endian), then `key` (bytes, or None).");

static PyObject *stamp(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t size, count;
    unsigned long long seconds, micros, first;
    int number_bytes;
    PyObject *key;
    if (!PyArg_ParseTuple(args, "w*nnKKKiO", &view, &size, &count, &seconds, &micros, &first,
                          &number_bytes, &key))
        return NULL;
    const char *key_bytes = NULL;
    Py_ssize_t key_length = 0;
    if (key != Py_None) {
        if (PyBytes_AsStringAndSize(key, (char **)&key_bytes, &key_length) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    Py_ssize_t header = 8 + number_bytes + key_length;
    if ((number_bytes != 4 && number_bytes != 8) || size < header || count < 0
            || (count > 0 && size > view.len / count)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the datagrams do not fit the buffer");
        return NULL;
    }
    unsigned char *at = (unsigned char *)view.buf;
    for (Py_ssize_t i = 0; i < count; i++, at += size) {
        put32(at, (uint32_t)seconds);
        put32(at + 4, (uint32_t)micros);
        if (number_bytes == 8)
            put64(at + 8, (uint64_t)(first + (unsigned long long)i));
        else
            put32(at + 8, (uint32_t)(first + (unsigned long long)i));
        if (key_length)
            memcpy(at + 8 + number_bytes, key_bytes, (size_t)key_length);
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"stamp", stamp, METH_VARARGS, stamp_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "simpleperf._fastpath",
    "The optional compiled fast path of the UDP sender.", -1, methods,
};

PyMODINIT_FUNC PyInit__fastpath(void)
{
    return PyModule_Create(&module);
}
