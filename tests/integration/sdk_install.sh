#!/usr/bin/env bash
# sdk_install.sh: the vendor SDK from the installed files alone (install to a
# temp prefix, headers compile alone, the example backend built out of tree
# and conformant, the cpu backend conformant). The work is .ci/sdk-check's;
# this runs it on the build ctest was configured for.
set -euo pipefail
exec bash "${PAGODA_SOURCE_DIR:?}/.ci/sdk-check" "${PAGODA_BUILD_DIR:?}"
