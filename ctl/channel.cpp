// --server and the --tls-* / --insecure options: the channel to xbngd.
#include <grpcpp/grpcpp.h>

#include "ctl/ctl.h"
#include "ctl/output.h"

namespace xbng::agent {

std::shared_ptr<grpc::Channel> make_channel(const CtlOptions& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (o.server.rfind("unix:", 0) == 0 || o.insecure) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions so;
    if (!o.tls_ca.empty()) so.pem_root_certs = read_all(o.tls_ca);
    if (!o.tls_cert.empty()) so.pem_cert_chain = read_all(o.tls_cert);
    if (!o.tls_key.empty()) so.pem_private_key = read_all(o.tls_key);
    creds = grpc::SslCredentials(so);
  }
  return grpc::CreateCustomChannel(o.server, creds, args);
}

}  // namespace xbng::agent
