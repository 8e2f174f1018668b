// onnxtrain._C.AtomicFile and write_file_atomic: the one file writer (src/core/atomic_file.h) for
// the Python writers (onnxtrain._files wraps it as a file object for torch.save and np.savez).
#include <memory>

#include "convert.h"
#include "core/atomic_file.h"
#include "onnxtrain/checkpoint.h"

namespace onnxtrain::python {

namespace {

// The bytes of a contiguous buffer (bytes, bytearray, memoryview, numpy array).
std::pair<const void*, uint64_t> bytes_of(const py::buffer_info& info) {
  if (info.ndim > 1) {
    py::ssize_t expect = info.itemsize;
    for (py::ssize_t k = info.ndim - 1; k >= 0; --k) {
      if (info.strides[size_t(k)] != expect) throw py::type_error("AtomicFile.write: the buffer is not contiguous");
      expect *= info.shape[size_t(k)];
    }
  } else if (info.ndim == 1 && info.shape[0] > 1 && info.strides[0] != info.itemsize) {
    throw py::type_error("AtomicFile.write: the buffer is not contiguous");
  }
  return {info.ptr, uint64_t(info.size) * uint64_t(info.itemsize)};
}

// Owns the writer so that discard() can drop it (and its temporary file) before garbage collection.
struct FileObj {
  std::unique_ptr<core::AtomicFile> f;
  core::AtomicFile& get() {
    if (!f) throw py::value_error("AtomicFile: the file is closed (committed or discarded)");
    return *f;
  }
};

}  // namespace

void bind_files(py::module_& m) {
  py::class_<FileObj>(m, "AtomicFile",
                      "A file written by onnxtrain's one writer: a regular file (or nothing) replaced atomically "
                      "at commit() (temporary file beside it, fsync, rename, fsync of the folder), a character device "
                      "or FIFO written through, a symbolic link followed; a directory, socket or block device "
                      "refused (ModelFileError). Discarded without commit(), it leaves the path as it was.")
      .def(py::init([](const std::string& path, const std::string& what) {
             auto o = std::make_unique<FileObj>();
             py::gil_scoped_release nogil;  // opening a FIFO waits for its reader
             o->f = std::make_unique<core::AtomicFile>(path, what);
             return o;
           }),
           py::arg("path"), py::arg("what") = "file")
      .def(
          "write",
          [](FileObj& o, py::buffer b) {
            core::AtomicFile& f = o.get();
            const py::buffer_info info = b.request();
            const auto [data, n] = bytes_of(info);
            py::gil_scoped_release nogil;
            f.write(data, n);
            return n;
          },
          py::arg("data"), "Appends the bytes of a contiguous buffer; returns their number.")
      .def(
          "commit",
          [](FileObj& o) {
            core::AtomicFile& f = o.get();
            {
              py::gil_scoped_release nogil;
              f.commit();
            }
            o.f.reset();
          },
          "Puts the file in place (fsync, rename over the target, fsync of the folder) and closes it.")
      .def("discard", [](FileObj& o) { o.f.reset(); },
           "Closes without committing: the temporary file is removed, the target untouched (no-op when closed).")
      .def_property_readonly("closed", [](const FileObj& o) { return !o.f; })
      .def_property_readonly("streams", [](FileObj& o) { return o.get().streams(); },
                             "Whether the bytes go straight to a character device, FIFO or descriptor.")
      .def_property_readonly("target", [](FileObj& o) { return o.get().target(); },
                             "The file written: the path with its symbolic links followed.");
  m.def(
      "write_file_atomic",
      [](const std::string& path, py::buffer b, const std::string& what) {
        const py::buffer_info info = b.request();
        const auto [data, n] = bytes_of(info);
        py::gil_scoped_release nogil;
        core::write_file_atomic(path, data, n, what);
      },
      py::arg("path"), py::arg("data"), py::arg("what") = "file",
      "Writes the bytes of `data` to `path` by onnxtrain's one writer (see AtomicFile).");
  m.def(
      "write_checkpoint_file",
      [](const std::string& path, const std::string& kind, std::map<std::string, int64_t> counters,
         std::map<std::string, std::string> text, py::list tensors) {
        CheckpointFile f{kind, std::move(counters), std::move(text), {}};
        std::vector<py::object> hold;
        for (py::handle item : tensors) {
          auto pair = item.cast<py::tuple>();
          if (pair.size() != 2) throw py::type_error("write_checkpoint_file: tensors are (name, array) pairs");
          const std::string name = pair[0].cast<std::string>();
          f.tensors.emplace_back(name, tensor_from_array(name, pair[1], hold));
        }
        py::gil_scoped_release nogil;
        write_checkpoint_file(path, f);
      },
      py::arg("path"), py::arg("kind"), py::arg("counters"), py::arg("text"), py::arg("tensors"),
      "Writes a file in onnxtrain's checkpoint format (include/onnxtrain/checkpoint.h: CheckpointFile) "
      "atomically: `kind` names the writer, `tensors` is a list of (name, numpy array).");
  m.def(
      "read_checkpoint_file",
      [](const std::string& path) {
        CheckpointFile f;
        {
          py::gil_scoped_release nogil;
          f = read_checkpoint_file(path);
        }
        py::list tensors;
        for (auto& [n, t] : f.tensors) tensors.append(py::make_tuple(n, array_from_tensor(std::move(t))));
        return py::make_tuple(f.kind, f.counters, f.text, tensors);
      },
      py::arg("path"), "Reads and verifies a checkpoint file: (kind, counters, text, [(name, array)]).");
}

}  // namespace onnxtrain::python
