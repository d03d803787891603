# The Troupe container image, at the repository's root:
#   docker build --build-arg TROUPE_COMMIT=$(git rev-parse --short=12 HEAD) -t troupe:0.1.0 .
# Two stages on Debian 12: the first installs the build packages (tools/dev, the one list
# of them) and makes the .deb; the second installs only that .deb, whose dependencies
# are the Debian runtime packages of the libraries it links, and runs as a user without
# privileges. The Fashion-MNIST data is not in the image: mount it (the Kubernetes
# example uses a volume) and pass --data, or install dataset-fashion-mnist on top.
FROM debian:12 AS build
ARG TROUPE_COMMIT=unknown
WORKDIR /src
COPY . .
RUN TROUPE_COMMIT=$TROUPE_COMMIT tools/dev package && cp build-package/troupe_*.deb /troupe.deb

FROM debian:12-slim AS runtime
COPY --from=build /troupe.deb /tmp/troupe.deb
RUN apt-get update \
 && apt-get install -y --no-install-recommends /tmp/troupe.deb openssh-client \
 && rm -rf /var/lib/apt/lists/* /tmp/troupe.deb \
 && useradd --create-home --uid 10001 troupe
USER troupe
WORKDIR /home/troupe
EXPOSE 7070 7071 7072 9464
ENTRYPOINT ["troupe"]
CMD ["--help"]
