# The layers of the source tree, lowest first, and what each may use. A layer's files may
# include only its own headers and those of the layers it uses, and its library links
# exactly those layers (troupe_link_layers); cmake/CheckLayering.cmake, run as the
# `layering` test, fails on any include that goes up or sideways. A test folder
# tests/<layer> follows its layer's rule and may also use tests/support.
#   base        expected, check, errc: plain C++ every layer uses
#   monitoring  metrics and the trace writer
#   tensor      numbers: tensors, ops, optimizers, codecs, tensor files, backends, compute
#   train       what trains a model: layers, models, data, stage replicas, evaluation, the
#               local trainer
#   transport   how tensors travel besides CAF's messages: shared-memory slots, doorbells,
#               ring mailboxes, bulk lanes over TCP/TLS, the job's TLS material, the
#               process's frame bound
#   core        CAF-free state machines and planning: the job spec, key tables, pipeline
#               layout and schedules, the shard, job and member cores
#   actors      the protocol and the actor shells around the cores
#   net         nodes on a network: CAF's TLS middleman and its guards, options, launchers
#   client      the client library (libtroupe: troupe::kv::kvstore) and its Python module
#   tools       the troupe CLI and the benchmarks
#   gpu         the CUDA module: it shares only header-only parts of tensor's backend interface
set(TROUPE_LAYERS base monitoring tensor train transport core actors net client tools gpu)
set(TROUPE_LAYER_base_USES "")
set(TROUPE_LAYER_monitoring_USES base)
set(TROUPE_LAYER_tensor_USES base)
set(TROUPE_LAYER_train_USES base tensor)
set(TROUPE_LAYER_transport_USES base monitoring tensor)
set(TROUPE_LAYER_core_USES base monitoring tensor train transport)
set(TROUPE_LAYER_actors_USES base monitoring tensor train transport core)
set(TROUPE_LAYER_net_USES base monitoring tensor train transport core actors)
set(TROUPE_LAYER_client_USES base monitoring tensor train transport core actors net)
set(TROUPE_LAYER_tools_USES base monitoring tensor train transport core actors net client)
set(TROUPE_LAYER_gpu_USES tensor/backend_abi.h tensor/backend_guard.hpp tensor/elementwise.hpp)
# A test folder may also use these: the gpu tests reach the module through tensor's loader
# and check that a process which loaded it still serves metrics.
set(TROUPE_TEST_gpu_USES base monitoring tensor)
# Only these layers (and their test folders) may include CAF; only gpu may include CUDA.
set(TROUPE_CAF_LAYERS actors net client tools)
set(TROUPE_CUDA_LAYERS gpu)

# The static library `target` of `layer` from the sources that follow: the source root on
# its include path, linked to the layers it uses.
function(troupe_layer_library target layer)
  add_library(${target} STATIC ${ARGN})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  troupe_link_layers(${target} ${layer})
endfunction()

# Links `target` to the libraries of the layers `layer` uses (a layer's library is
# troupe_<layer>; entries naming single header files link nothing).
function(troupe_link_layers target layer)
  foreach(used IN LISTS TROUPE_LAYER_${layer}_USES)
    if(NOT used MATCHES "/")
      target_link_libraries(${target} PUBLIC troupe_${used})
    endif()
  endforeach()
endfunction()
