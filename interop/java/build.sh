#!/usr/bin/env bash
# Builds the Redisson driver of tests/redisson.rs: target/redisson-driver.jar
# plus target/classpath.txt (Redisson and its dependencies in ~/.m2).
# Offline when ~/.m2 already has everything, from Maven Central otherwise.
# Needs a JDK (17 or later) and Maven 3.8 or later on PATH.
set -euo pipefail
cd "$(dirname "$0")"
for tool in java mvn; do
    if ! command -v "$tool" >/dev/null; then
        echo "interop/java/build.sh: $tool is not installed (apt-get install -y default-jdk-headless maven)" >&2
        exit 1
    fi
done
if ! mvn -B -q -o package -DskipTests; then
    echo "interop/java/build.sh: offline build failed; fetching from Maven Central" >&2
    mvn -B -q package -DskipTests
fi
test -s target/redisson-driver.jar && test -s target/classpath.txt
