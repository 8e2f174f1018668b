# onnxtrain's CMake package (installed to <prefix>/lib/cmake/onnxtrain):
#   find_package(onnxtrain CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE onnxtrain::onnxtrain)
# gives the shared library (its own dependencies are recorded in it) and the include folder
# (include/onnxtrain/training_c_api.h for C, the other headers for C++).
get_filename_component(_onnxtrain_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET onnxtrain::onnxtrain)
  add_library(onnxtrain::onnxtrain SHARED IMPORTED)
  set_target_properties(onnxtrain::onnxtrain PROPERTIES
    IMPORTED_LOCATION "${_onnxtrain_prefix}/lib/libonnxtrain.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_onnxtrain_prefix}/include")
endif()
unset(_onnxtrain_prefix)
