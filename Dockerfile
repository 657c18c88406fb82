# One image for every function; which one runs is chosen at start with FUNCTION (set it in the
# Knative Service's env), e.g.
#   docker build -t operator-functions .
#   docker run -e FUNCTION=immortal-container -e KUBECONFIG=/kube/config -v ~/.kube:/kube operator-functions
# Each function is one self-contained esbuild bundle (dist/<name>.cjs, no node_modules at run
# time); dist/main.mjs picks it and runs it from its code cache. test/integration/bundle.test.ts
# runs this file's build command, COPY sources, RUN steps and ENTRYPOINT outside Docker, so keep
# them in the simple forms used here.

FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: the `node` dev dependency would download a second Node 24 (this image has
# one), and esbuild's JS API finds its binary through its platform package without a script.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY build ./build
COPY functions ./functions
COPY processes ./processes
RUN node build/build.ts

FROM node:24-slim
WORKDIR /app
# Knative sets PORT itself; 8080 is its default.
ENV NODE_ENV=production PORT=8080
COPY --from=build /app/dist ./dist
# Each function's V8 code cache (dist/<name>.code-cache, see build/build.ts), made by this very
# Node with the ENTRYPOINT's flags (IMAGE_NODE_FLAGS in build/node-flags.ts; V8 rejects a cache made
# with other flags): starts each function once (no cluster needed) and stops it. Written as root
# into dist/, readable by all; at run time it is only read (a rejected or missing cache only
# costs start time: the function compiles its bundle and says so on stderr).
RUN node --max-semi-space-size=1 dist/warm-cache.mjs
# The `node` user of the base image, by number: Kubernetes can only verify runAsNonRoot for a
# numeric USER, and the generated Knative Service runs as this very UID (runAsUser 1000, see
# eventing/manifests/service.ts).
USER 1000:1000
EXPOSE 8080
# Flags: less memory for an instance that idles most of its life (IMAGE_NODE_FLAGS, build/node-flags.ts).
ENTRYPOINT ["node", "--max-semi-space-size=1", "dist/main.mjs"]
