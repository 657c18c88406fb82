# One image for every function; which one runs is chosen at start with FUNCTION (set it in the
# Knative Service's env), e.g.
#   docker build -t operator-functions .
#   docker run -e FUNCTION=immortal-container -e KUBECONFIG=/kube/config -v ~/.kube:/kube operator-functions
# Each function is one self-contained esbuild bundle (dist/<name>.mjs, no node_modules at run
# time); dist/main.mjs picks it. test/integration/bundle.test.ts runs this file's build command,
# COPY sources and ENTRYPOINT outside Docker, so keep them in the simple forms used here.

FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: the `node` dev dependency would download a second Node 24 (this image has
# one), and esbuild's JS API finds its binary through its platform package without a script.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY bin ./bin
COPY functions ./functions
RUN node bin/build.ts

FROM node:24-slim
WORKDIR /app
# Knative sets PORT itself; 8080 is its default. NODE_COMPILE_CACHE: V8 code cache for the
# bundles, filled below so the first start of a new instance skips compiling it.
ENV NODE_ENV=production NODE_COMPILE_CACHE=/app/.cache PORT=8080
COPY --from=build /app/dist ./dist
RUN mkdir -p /app/.cache && chown 1000:1000 /app/.cache
# The `node` user of the base image, by number: Kubernetes can only verify runAsNonRoot for a
# numeric USER, and the generated Knative Service runs as this very UID (runAsUser 1000, see
# eventing/manifests/service.ts). It must be the same UID that fills the cache below: Node keeps
# its compile cache in a folder named after the UID (…-1000), so a pod under another UID finds
# no cache and, with a read-only root file system, cannot write one (it still starts, slower).
USER 1000:1000
# Starts each function once (no cluster needed) and stops it; Node writes the cache on exit.
# At run time the cache is only read (readOnlyRootFilesystem: Node skips writing an unchanged
# cache and ignores a folder it cannot write). Cache files are created 0600: make them readable.
RUN node dist/warm-cache.mjs && chmod -R a+rX /app/.cache
EXPOSE 8080
ENTRYPOINT ["node", "dist/main.mjs"]
